"""FiLM on one client's batch: the modulation folded into the conv weights (the shipped path,
models/cnn.py) against the modulation as a step of its own (FEDCOND_FILM_FOLD=0).

The model Conditional-FedAvg trains by default: the MNIST CNN conditioned by FiLM on 32 statistics,
the shipped CPU kernels, one thread. Timed both ways in this run, interleaved: one SGD step (batch
64, thread CPU time, median of --steps) and one local epoch of a client's job through the engine
(--samples, every sample with the client's s; best of --repeats). The models trained both ways are
compared too (the same function to float rounding, not bitwise). The last line is
`film epoch: step-of-its-own/folded R.RRx`.

Usage: python benchmarks/film_fold.py [--samples 600] [--steps 40] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import time
from statistics import median

import torch
import torch.nn.functional as F

from fedcond.engine import Job, SGDConfig, train_job
from fedcond.engine.local_sgd import cpu_model
from fedcond.models import ModelSpec
from fedcond.models.cnn import FILM_FOLD_ENV
from fedcond.models.cpu_kernels.build import cpu_model as cpu_name
from fedcond.models.cpu_kernels.build import vector_isa

WAYS = (("folded", "1"), ("step of its own", "0"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=600)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    spec = ModelSpec((1, 28, 28), 10, 32, "film", (0.1307,), (0.3081,))
    model, sgd = cpu_model(spec), SGDConfig()
    with torch.no_grad():  # a modulation that is not the identity, as after some training
        for lin in model.film:
            lin.weight.normal_(std=0.1)
    w0 = {k: v.clone() for k, v in model.state_dict().items()}
    print(f"cpu: {cpu_name()} ({vector_isa()}), torch {torch.__version__}, one thread")

    x = torch.randint(0, 256, (64, 1, 28, 28), dtype=torch.uint8).contiguous(memory_format=torch.channels_last)
    y, s = torch.randint(0, 10, (64,)), torch.randn(1, 32).expand(64, 32).clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    steps: dict[str, list[float]] = {name: [] for name, _ in WAYS}
    for i in range(args.steps + 5):  # interleaved; the first 5 of each warm up
        for name, flag in WAYS:
            os.environ[FILM_FOLD_ENV] = flag
            start = time.thread_time()
            opt.zero_grad()
            F.cross_entropy(model(x, s), y).backward()
            opt.step()
            if i >= 5:
                steps[name].append(time.thread_time() - start)
    folded, plain = median(steps["folded"]), median(steps["step of its own"])
    print(f"step, batch 64: folded {folded * 1e3:.1f} ms, step of its own {plain * 1e3:.1f} ms ({plain / folded:.2f}x)")

    xs = torch.randint(0, 256, (args.samples, 1, 28, 28), dtype=torch.uint8)
    job = Job(params=w0, x=xs, y=torch.randint(0, 10, (args.samples,)), s=torch.randn(1, 32).expand(args.samples, 32),
              epochs=1, seed=(0, 1))
    epoch: dict[str, list[float]] = {name: [] for name, _ in WAYS}
    trained = {}
    for _ in range(args.repeats):
        for name, flag in WAYS:
            os.environ[FILM_FOLD_ENV] = flag
            start = time.perf_counter()
            trained[name] = train_job(model, job, sgd).params
            epoch[name].append(time.perf_counter() - start)
    os.environ.pop(FILM_FOLD_ENV)
    diff = max(float((trained["folded"][k] - trained["step of its own"][k]).abs().max()) for k in w0)
    folded, plain = min(epoch["folded"]), min(epoch["step of its own"])
    print(f"epoch, {args.samples} samples: folded {folded:.2f} s, step of its own {plain:.2f} s; "
          f"trained weights differ by at most {diff:.1e}")
    print(f"film epoch: step-of-its-own/folded {plain / folded:.2f}x")


if __name__ == "__main__":
    main()
