"""Probe: a federated method round by round: training loss, the server's step and the weights' norm.

Found at stop 59: the default Conditional-FedAvg (server momentum, FiLM, 5 local epochs) diverged on
E1 FMNIST K=2 rich in round 7 (training loss nan). This prints, after every round, the round's training
loss, the norm of what the round changed in the shared weights and their norm, as JSON lines, so two
server optimisers can be set side by side on the rounds before a divergence. A run that fails prints
its error as the last line. `--rounds` stops early (the protocol's epochs are set to it).
Where the state holds several models (Gossip: one per client), `layer_norms` is each weight tensor's
norm averaged over them: Gossip's collapse (issue 40) is the averaging of independent
initialisations shrinking every layer until no gradient is left.

    python probes/round_trace.py --experiment E1/fmnist/K=2/rich --method Conditional-FedAvg \
        --protocol 'paper[statistic=class_means,holdout_clients=1]' --rounds 5 \
        --out docs/results/readings/conditional_fedavg_divergence.jsonl
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from fedcond import experiments as X
from fedcond.errors import FedcondError
from fedcond.simulate import run_method
from probe_output import emit  # probes/ is on the path when a probe runs as a script


def norm(params: dict) -> float:
    return sum(float((v.double() ** 2).sum()) for v in params.values() if v.is_floating_point()) ** 0.5


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="E1/fmnist/K=2/rich")
    ap.add_argument("--method", default="Conditional-FedAvg")
    ap.add_argument("--protocol", default="paper[statistic=class_means,holdout_clients=1]")
    ap.add_argument("--rounds", type=int, default=None, help="stop after this many rounds (default: the protocol's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="append the lines here too")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    proto, fraction = X.protocol(args.protocol)
    if args.rounds is not None:
        proto = proto.replace(epochs=args.rounds * proto.local_epochs)
    scenario = X.select(args.experiment)[0].spec(args.seed, None, fraction).build()
    start, before = time.perf_counter(), {}

    def record(line: dict) -> None:
        emit({"experiment": args.experiment, "method": args.method, **line}, args.out)

    def on_round(r, state):
        w = state.models[0]
        step = norm({k: w[k] - before[k] for k in w}) if before else None
        before.clear()
        before.update({k: v.clone() for k, v in w.items()})
        models = state.models
        layers = {k: round(sum(float(m[k].norm()) for m in models) / len(models), 4)
                  for k in w if k.endswith("weight") and w[k].is_floating_point()}
        record({"round": r, "train_loss": state.train_loss, "step_norm": step, "weight_norm": norm(w),
                "models": len(models), "layer_norms": layers, "seconds": round(time.perf_counter() - start)})

    try:
        res = run_method(scenario, args.method, proto, args.seed, on_round=on_round)
    except FedcondError as e:  # a divergence is a result here
        record({"error": str(e)})
        return 0
    record({"accuracy": res.accuracy, "rounds": res.rounds})
    return 0


if __name__ == "__main__":
    sys.exit(main())
