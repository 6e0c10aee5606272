"""Probe: what a federated method scores when each true cluster is trained on its own.

Oracle (the paper's ceiling for clustered methods) trains one model per true cluster on the
cluster's *pooled* data. A federated method cannot pool: at super sparse its 100 clients a cluster
hold ~300 samples each and take a few local steps a round. This probe runs a federated method on
each true cluster's clients alone (a sub-federation: no other cluster to tell apart, nothing else
changed: protocol, rounds, seeds, statistic), so its score is the ceiling of that method at that
budget, the part of the gap to Oracle that federation costs rather than conditioning (issue 45).

    python probes/federated_ceiling.py --experiment E3b/fmnist/K=2/super_sparse \
        --method Conditional-FedAvg --protocol 'paper[statistic=class_means]' --clusters 0 \
        --out docs/results/readings/federated_ceiling.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import numpy as np
import torch

from fedcond import experiments as X
from fedcond.scenarios.federation import GroundTruth, Scenario
from fedcond.simulate import run_method
from probe_output import emit  # probes/ is on the path when a probe runs as a script


def cluster_scenario(scenario: Scenario, k: int) -> Scenario:
    """The clients of true cluster k alone, in their original order, as a scenario of one cluster."""
    keep = np.flatnonzero(scenario.truth.cluster == k)
    fed = dataclasses.replace(scenario.federation, clients=tuple(scenario.federation.clients[i] for i in keep))
    truth = GroundTruth(cluster=np.zeros(len(keep), dtype=np.int64), cluster_names=(scenario.truth.cluster_names[k],))
    return Scenario(federation=fed, truth=truth)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="E3b/fmnist/K=2/super_sparse")
    ap.add_argument("--method", default="Conditional-FedAvg")
    ap.add_argument("--protocol", default="paper[statistic=class_means]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clusters", default=None, help="comma-separated true cluster indices (default: every cluster)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default=None, help="append each cluster's result as a JSON line here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    exp = X.select(args.experiment)[0]
    proto, fraction = X.protocol(args.protocol)
    scenario = exp.spec(args.seed, args.data_dir, fraction).build()
    ks = range(scenario.truth.num_clusters) if args.clusters is None else [int(k) for k in args.clusters.split(",")]
    for k in ks:
        sub = cluster_scenario(scenario, k)
        start = time.perf_counter()
        res = run_method(sub, args.method, proto, args.seed, data_dir=args.data_dir)
        emit({
            "experiment": args.experiment, "method": args.method, "protocol": args.protocol, "seed": args.seed,
            "cluster": scenario.truth.cluster_names[k], "clients": sub.federation.num_clients,
            "accuracy": res.accuracy, "weighted_accuracy": res.weighted_accuracy, "rounds": res.rounds,
            "traffic": res.extra.get("traffic"), "seconds": round(time.perf_counter() - start, 1),
        }, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
