"""Probe: does IFCA find the clusters in its first rounds, or do all clients pick one model?

The paper's IFCA equals its FedAvg to 0.3 pp wherever it fails (E3a MNIST very/super sparse,
E2a FMNIST at every sparsity, E3a CIFAR, E4b C=2, 3): an all-or-nothing event, the signature of
every client choosing the same cluster model in the first E-step, so that one model is trained as
FedAvg's and the others never. This traces the assignment of the first rounds (cheap: no need to
train 20 rounds to see it) under a protocol variant, e.g. `paper[inputs=raw]`: per round, how many
clients each cluster model serves and the ARI against the true clusters.

    python probes/ifca_first_rounds.py --experiments E3a/mnist/K=2/rich,E3a/mnist/K=2/super_sparse \
        --protocols "paper;paper[inputs=raw]" --rounds 3 --out docs/results/readings/ifca_first_rounds.jsonl
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from fedcond import experiments as X
from fedcond.simulate import ari, run_method
from probe_output import emit  # probes/ is on the path when a probe runs as a script


class Enough(Exception):
    """Raised from the round callback once the traced rounds are done."""


def trace(experiment: str, protocol: str, seed: int, rounds: int, data_dir=None, method: str = "IFCA") -> dict:
    exp = X.select(experiment)[0]
    proto, fraction = X.protocol(protocol)
    scenario = exp.spec(seed, data_dir, fraction, **X.scenario_options(protocol)).build()
    truth = scenario.truth.cluster
    k = len(scenario.truth.cluster_names)
    out = {"experiment": experiment, "protocol": protocol, "seed": seed, "k": k, "rounds": []}
    if method != "IFCA":
        out["method"] = method
    start = time.perf_counter()

    def on_round(r, state):
        choice = list(state.assignment)
        out["rounds"].append({
            "round": r,
            "sizes": [choice.count(c) for c in range(k)],
            "ari": round(ari(choice, truth), 4),
        })
        if r + 1 >= rounds:
            raise Enough

    try:
        run_method(scenario, method, proto, seed, on_round=on_round, data_dir=data_dir)
    except Enough:
        pass
    out["seconds"] = round(time.perf_counter() - start, 1)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiments", required=True, help="comma-separated registry names")
    ap.add_argument("--protocols", default="paper", help="protocol names separated by ; (a variant may hold commas)")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--method", default="IFCA", help="IFCA with its options, e.g. 'IFCA(weight_init=glorot)'")
    ap.add_argument("--out", default=None, help="append each trace as a JSON line here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    for experiment in args.experiments.split(","):
        for protocol in args.protocols.split(";"):
            for seed in (int(s) for s in args.seeds.split(",")):
                emit(trace(experiment, protocol, seed, args.rounds, args.data_dir, args.method), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
