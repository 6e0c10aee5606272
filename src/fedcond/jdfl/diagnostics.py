"""Discovery diagnostics (SPEC Part C, last claim): how well do the pseudo-domains match the true
domains with M fixed to the true number, over E0, batch size and layer subset; and how often does
the elbow pick the true number?

A cell is named `discovery(e0=E,batch=B,layers=L)`. Cells that share a batch size share one
training (snapshots after each epoch, see `discovery.update_snapshots`), so the whole
5 x 3 x 3 grid costs 3 trainings of 5 epochs per seed.
"""

from __future__ import annotations

import re
import time
from typing import Iterator

import torch

from ..errors import FedcondError
from .discovery import cluster, fit_all, layer_names, update_snapshots, update_vectors

_NAME = re.compile(r"^discovery\(e0=(\d+),batch=(\d+),layers=([ABC])\)$")


def parse(name: str) -> tuple[int, int, str]:
    m = _NAME.match(name.replace(" ", ""))
    if not m:
        raise FedcondError(f"bad discovery cell '{name}'; expected discovery(e0=E,batch=B,layers=A|B|C)")
    return int(m.group(1)), int(m.group(2)), m.group(3)


def run_cells(scenario, names: list[str], protocol, seed: int, workers: int = 1) -> Iterator:
    """Yield one result per cell (accuracy NaN: nothing is trained to completion; the figures are in
    `extra`: ari with M = the true number of domains, the elbow's M and its ARI, the inertia curve)."""
    from ..algorithms import FedAvg
    from ..engine import SGDConfig, make_engine
    from ..simulate import MethodResult, ari, make_context

    cells = [(n, *parse(n)) for n in names]
    truth = scenario.truth.cluster
    true_m = scenario.truth.num_clusters
    engine = make_engine(SGDConfig.of(protocol), workers)
    try:
        ctx = make_context(scenario, FedAvg(), protocol, seed, engine=engine)
        with torch.random.fork_rng(devices=[]):
            model = ctx.spec(False).build()
        for batch in sorted({b for _, _, b, _ in cells}):
            start = time.perf_counter()
            group = [c for c in cells if c[2] == batch]
            w0, snaps = update_snapshots(ctx, max(e for _, e, _, _ in group), batch)
            train_seconds = time.perf_counter() - start
            for name, e0, _, layers in group:
                t = time.perf_counter()
                vectors = update_vectors(model, w0, snaps[e0 - 1], layers)
                fits = fit_all(vectors, max(true_m, min(8, len(truth) - 1)), seed)
                fixed = cluster(vectors, true_m, max_slots=8, seed=seed, fits=fits)
                elbow = cluster(vectors, None, max_slots=8, seed=seed, fits=fits)
                extra = {
                    "ari": ari(fixed.domains, truth),
                    "elbow": elbow.slots,
                    "ari_elbow": ari(elbow.domains, truth),
                    "true_domains": true_m,
                    "inertia": list(elbow.inertia),
                    "e0": e0,
                    "batch": batch,
                    "layers": layers,
                    "parameters": len(layer_names(model, layers)),
                }
                yield MethodResult(
                    method=name,
                    accuracy=float("nan"),
                    accuracy_std=float("nan"),
                    weighted_accuracy=float("nan"),
                    per_client=[],
                    rounds=0,
                    train_loss=float("nan"),
                    seconds=time.perf_counter() - t + train_seconds / len(group),
                    hyperparameters={"e0": e0, "batch": batch, "layers": layers},
                    extra=extra,
                )
    finally:
        engine.close()
