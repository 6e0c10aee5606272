"""FedRep's round on one client of E1 MNIST K=2 rich (~6,000 samples): the head update (10 epochs, body
frozen) and the body update (1 epoch), with the frozen body's features computed once per job (the
shipped path, engine/local_sgd.py frozen_features) against once per step (FEDCOND_FEATURE_CACHE=0).

Both measured in this run, one thread, the shipped CPU kernels; the head trained both ways is compared
too. The last line is `fedrep round: per-step/cached R.RRx`.

Usage: python benchmarks/fedrep_head.py [--samples 6000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from fedcond.algorithms.fedrep import BodyOnlyLoss, HeadOnlyLoss
from fedcond.engine import Job, SGDConfig, train_job
from fedcond.engine.local_sgd import FEATURE_CACHE_ENV, cpu_model
from fedcond.models import ModelSpec
from fedcond.models.cpu_kernels.build import cpu_model as cpu_name
from fedcond.models.cpu_kernels.build import vector_isa


def timed(model, job, sgd, cache: bool):
    os.environ[FEATURE_CACHE_ENV] = "1" if cache else "0"
    start = time.perf_counter()
    res = train_job(model, job, sgd)
    return time.perf_counter() - start, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=6000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    spec = ModelSpec((1, 28, 28), 10, mean=(0.1307,), std=(0.3081,))
    model, sgd = cpu_model(spec), SGDConfig()
    x = torch.randint(0, 256, (args.samples, 1, 28, 28), dtype=torch.uint8)
    y = torch.randint(0, 10, (args.samples,))
    w0 = spec.build().state_dict()
    head = Job(params=w0, x=x, y=y, s=None, epochs=10, seed=(0, 1), loss_fn=HeadOnlyLoss())
    body = Job(params=w0, x=x, y=y, s=None, epochs=1, seed=(0, 2), loss_fn=BodyOnlyLoss())
    print(f"cpu: {cpu_name()} ({vector_isa()}), torch {torch.__version__}, one thread, {args.samples} samples")
    t: dict[str, list[float]] = {"cached": [], "per-step": []}
    heads = {}
    for _ in range(args.repeats):  # interleaved, so that a busy machine slows both alike
        for name, cache in (("cached", True), ("per-step", False)):
            seconds, res = timed(model, head, sgd, cache)
            t[name].append(seconds)
            heads[name] = res.params
    body_s = min(timed(model, body, sgd, True)[0] for _ in range(args.repeats))
    diff = max(float((heads["cached"][k] - heads["per-step"][k]).abs().max()) for k in heads["cached"])
    cached, plain = min(t["cached"]), min(t["per-step"])
    print(
        f"head update, 10 epochs: cached {cached:.2f} s, per-step {plain:.2f} s ({plain / cached:.2f}x); "
        f"heads differ by at most {diff:.1e}"
    )
    print(f"body update, 1 epoch: {body_s:.2f} s")
    print(f"fedrep round: per-step/cached {(plain + body_s) / (cached + body_s):.2f}x")


if __name__ == "__main__":
    main()
