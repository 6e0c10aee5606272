"""Probe: which batch-norm statistics does a one-model method's CIFAR score depend on?

fedcond averages batch norm's running statistics with the weights (FedAvg, Gossip) and evaluates
in eval mode, so a client whose data come from one cluster is scored with statistics mixed across
clusters. Two other readings leave the weights' trajectory untouched (in train mode batch norm
normalises with the batch's own statistics, so the running buffers never reach a gradient):
  averaged  the running statistics travel and are averaged with the weights (fedcond's default);
  local     only parameters() are averaged: each client keeps its own running statistics;
  batch     evaluation in train mode: the test batch's own statistics (one batch per 1024 samples).
So one training run measures all three exactly. The `local` buffers are tracked beside the run:
a running statistic is linear in its start (rm <- (1 - m) rm + m * batch statistic), so after B
batches from start S a client's buffer is post(S) = post(S_run) + (1 - m)^B (S - S_run), where
S_run is what the run started it from and post(S_run) what the run's local training left. Hence
L_i(r) = post_i(r) + a_i (L_i(r - 1) - S_i(r)), a_i = (1 - m)^B_i; `--check` verifies this against
training that really keeps the buffers per client.

    python probes/bn_running_stats.py --experiment E1/cifar10/K=2/rich --method FedAvg --db docs/results/probes.sqlite
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from fedcond import experiments as X
from fedcond.engine import LoopEngine, SGDConfig, batch_order, clone_params, predict
from fedcond.simulate import accuracies, run_method
from probe_output import emit  # probes/ is on the path when a probe runs as a script

BUFFERS = ("running_mean", "running_var")


def is_stat(key: str) -> bool:
    return key.endswith(BUFFERS)


class RecordingEngine(LoopEngine):
    """The loop engine that remembers, for the last train() call, each job's starting running
    statistics and those its local training left (job order = client order for FedAvg and Gossip)."""

    def train(self, spec, jobs):
        results = super().train(spec, jobs)
        self.last = [({k: v.clone() for k, v in j.params.items() if is_stat(k)},
                      {k: v.clone() for k, v in res.params.items() if is_stat(k)}) for j, res in zip(jobs, results)]
        return results


class LocalStats:
    """Each client's running statistics under the `local` reading, updated once per round."""

    def __init__(self, fed, batch_size: int, bn_momentum: float = 0.1):
        decay = [(1 - bn_momentum) ** len(batch_order(c.n_train, batch_size, 1, (0,))) for c in fed.clients]
        self.decay = decay  # a_i: what is left of a buffer's start after one local epoch
        self.buffers: list[dict] | None = None

    def update(self, recorded) -> None:
        if self.buffers is None:  # round 1: every client starts from the initial buffers, as in the run
            self.buffers = [dict(start) for start, _ in recorded]
        self.buffers = [{k: post[k] + a * (mine[k] - start[k]) for k in post}
                        for (start, post), mine, a in zip(recorded, self.buffers, self.decay)]


def evaluate(fed, model, states: list[dict], train_mode: bool = False) -> tuple[float, float]:
    """Mean accuracy over clients and over test samples, client i predicting with states[i]."""
    hits = []
    for c, params in zip(fed.clients, states):
        if train_mode:
            model.load_state_dict(params)
            model.train()
            with torch.no_grad():
                pred = torch.cat([model(c.x_test[i:i + 1024].contiguous(memory_format=torch.channels_last), None).argmax(1)
                                  for i in range(0, c.n_test, 1024)])
        else:
            pred = predict(model, params, c.x_test, None)
        hits.append((pred == c.y_test).numpy())
    per_client, weighted = accuracies(hits)
    return float(np.mean(per_client)), float(weighted)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="E1/cifar10/K=2/rich")
    ap.add_argument("--method", default="FedAvg", choices=["FedAvg", "Gossip"])
    ap.add_argument("--protocol", default="paper")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default=None, help="append the result as a JSON line here")
    ap.add_argument("--check", action="store_true", help="verify the tracked local buffers against real per-client buffers")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    exp = X.select(args.experiment)[0]
    proto, fraction = X.protocol(args.protocol)
    spec = exp.spec(args.seed, args.data_dir, fraction)
    scenario = spec.build()
    fed = scenario.federation
    engine = RecordingEngine(SGDConfig(proto.lr, proto.momentum, proto.batch_size))
    local = LocalStats(fed, proto.batch_size)
    start = time.perf_counter()
    states_seen = []

    def on_round(r, state):
        local.update(engine.last)
        states_seen.append(state)

    res = run_method(scenario, args.method, proto, args.seed, on_round=on_round, engine=engine, data_dir=args.data_dir)
    state = states_seen[-1]
    averaged = [state.models[state.assignment[i]] for i in range(fed.num_clients)]
    with_local = [{**params, **mine} for params, mine in zip(averaged, local.buffers)]
    model = engine.model(_spec(fed))
    out = {"experiment": args.experiment, "method": args.method, "protocol": args.protocol, "seed": args.seed,
           "run_accuracy": res.accuracy, "seconds": time.perf_counter() - start}
    for name, states, train_mode in (("averaged", averaged, False), ("local", with_local, False), ("batch", averaged, True)):
        out[name] = evaluate(fed, model, states, train_mode)
    if args.check:
        out["check_max_abs_diff"] = _check(scenario, args, proto, local)
    emit(out, args.out)
    return 0


def _spec(fed):
    from fedcond.models import ModelSpec

    return ModelSpec(fed.input_shape, fed.num_classes, 0, "concat", fed.mean, fed.std)


def _check(scenario, args, proto, local) -> float:
    """FedAvg trained again with every client really keeping its own running statistics: the
    largest difference from the tracked buffers (float rounding only, if the tracking is right)."""
    from fedcond.engine import Job, weighted_average

    fed = scenario.federation
    engine = LoopEngine(SGDConfig(proto.lr, proto.momentum, proto.batch_size))
    spec = _spec(fed)
    torch.manual_seed(int(np.random.SeedSequence([args.seed, 0x1417, 0]).generate_state(1)[0]))
    with torch.random.fork_rng(devices=[]):
        glob = clone_params(spec.build().state_dict())
    mine = [{k: v.clone() for k, v in glob.items() if is_stat(k)} for _ in fed.clients]
    for r in range(proto.rounds):
        jobs = [Job(params={**glob, **mine[i]}, x=c.x_train, y=c.y_train, s=None, epochs=1, seed=(args.seed, r, i))
                for i, c in enumerate(fed.clients)]
        results = engine.train(spec, jobs)
        mine = [{k: v.clone() for k, v in res.params.items() if is_stat(k)} for res in results]
        glob = weighted_average([res.params for res in results], fed.sizes())
    return max(float((mine[i][k] - local.buffers[i][k]).abs().max()) for i in range(len(mine)) for k in mine[i])


if __name__ == "__main__":
    sys.exit(main())
