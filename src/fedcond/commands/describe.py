"""`fedcond scenario describe`: the clients of one scenario (clusters, sizes, labels), a compact
summary of sizes and classes per client, and optionally the label distribution as a picture."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np

from ..errors import FedcondError

MAX_CLUSTER_LINES = 12  # a pathological federation has dozens of class sets: the rest is counted


def describe_command(args) -> int:
    import torch

    from .run import scenario_spec

    torch.set_num_threads(1)
    if args.plot is not None and not str(args.plot).lower().endswith(".png"):
        raise FedcondError(f"--plot writes a PNG: give a path ending in .png, got '{args.plot}'")
    scenario = scenario_spec(args, default_k=2).build()
    fed, truth = scenario.federation, scenario.truth
    counts = fed.label_counts()
    clients: list[dict[str, Any]] = [
        {
            "id": i,
            "cluster": int(truth.cluster[i]) if truth.known else None,
            "n_train": c.n_train,
            "n_test": c.n_test,
            "train_labels": {int(k): v for k, v in sorted(Counter(c.y_train.tolist()).items())},
            "test_labels": {int(k): v for k, v in sorted(Counter(c.y_test.tolist()).items())},
        }
        for i, c in enumerate(fed.clients)
    ]
    if args.plot is not None:
        from ..report.partition_plot import label_distribution

        label_distribution(counts, fed.label_names, _title(fed), args.plot)
    if args.json:
        print(
            json.dumps(
                {
                    "family": fed.family,
                    "dataset": fed.dataset,
                    "params": fed.params,
                    "num_classes": fed.num_classes,
                    "clusters_known": truth.known,
                    "clusters": list(truth.cluster_names) if truth.known else [],
                    "summary": summary(counts),
                    "clients": clients,
                }
            )
        )
        return 0
    plural = "s" if truth.num_clusters != 1 else ""
    clusters = f"{truth.num_clusters} cluster{plural}" if truth.known else "no true clusters"
    print(f"{_title(fed)}: {fed.num_clients} clients, {clusters}, {fed.num_classes} task labels")
    s = summary(counts)
    print(
        f"  train samples per client: min {s['size_min']}, median {s['size_median']:g}, max {s['size_max']}; "
        f"test {sum(c.n_test for c in fed.clients)} in all"
    )
    print(
        f"  classes per client: min {s['classes_min']}, median {s['classes_median']:g}, max {s['classes_max']}; "
        f"largest class share per client: median {s['top_share_median']:.2f}"
    )
    if truth.known:
        for k, name in enumerate(truth.cluster_names[:MAX_CLUSTER_LINES]):
            members = [c for c in clients if c["cluster"] == k]
            labels = sorted({lab for c in members for lab in c["train_labels"]})
            print(
                f"  cluster {k} ({name}): {len(members)} clients, train {sum(c['n_train'] for c in members)}, "
                f"test {sum(c['n_test'] for c in members)}, labels {labels}"
            )
        if truth.num_clusters > MAX_CLUSTER_LINES:
            print(f"  ... and {truth.num_clusters - MAX_CLUSTER_LINES} more clusters (--json lists every client)")
    if args.plot is not None:
        print(f"  label distribution drawn to {args.plot}")
    return 0


def summary(counts: np.ndarray) -> dict:
    """Sizes and classes held per client (min / median / max), and the median largest class share."""
    sizes = counts.sum(axis=1)
    held = (counts > 0).sum(axis=1)
    top = counts.max(axis=1) / np.maximum(sizes, 1)
    return {
        "size_min": int(sizes.min()),
        "size_median": float(np.median(sizes)),
        "size_max": int(sizes.max()),
        "classes_min": int(held.min()),
        "classes_median": float(np.median(held)),
        "classes_max": int(held.max()),
        "top_share_median": float(np.median(top)),
    }


def _title(fed) -> str:
    params = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in fed.params.items())
    return f"{fed.family} on {fed.dataset}" + (f" ({params})" if params else "")
