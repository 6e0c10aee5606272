"""Subnormal floats: one training step of each CNN whose gradients are subnormal, kept against flushed.

Late in training, a client whose loss is near zero back-propagates gradients below float32's
smallest normal number (1.2e-38); x86 CPUs compute on such operands in microcode. Here the loss
is scaled by 1e-36 so that every step is such a step, and each step is timed with subnormals kept
(IEEE) and flushed (FTZ + DAZ, fedcond's default: engine/denormals.py), interleaved, one thread,
batch 64, median of --reps. Prints the ratio kept / flushed per model: the slowdown a run pays
where its gradients are subnormal (measured on a real run in engine/denormals.py's docstring).

Usage: python benchmarks/denormals.py [--reps 10]
"""

from __future__ import annotations

import argparse
import time
from statistics import median_high

import torch
import torch.nn.functional as F

from fedcond.engine.local_sgd import channels_last, cpu_model
from fedcond.models import ModelSpec

MODELS = (("MNIST CNN", (1, 28, 28), 10), ("CIFAR CNN", (3, 32, 32), 10), ("light CNN", (3, 112, 112), 28))
SCALE = 1e-36  # gradients of order 1e-3 become 1e-39: subnormal


def step(model, x, y) -> float:
    t = time.perf_counter()
    model.zero_grad(set_to_none=True)
    (F.cross_entropy(model(x, None), y) * SCALE).backward()
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    print(f"{'model':10s} {'kept ms':>9s} {'flushed ms':>11s} {'kept / flushed':>15s}")
    for name, shape, classes in MODELS:
        model = cpu_model(ModelSpec(shape, classes, 0))
        x = channels_last(torch.randint(0, 256, (64, *shape), dtype=torch.uint8, generator=gen))
        y = torch.randint(0, classes, (64,), generator=gen)
        times = {False: [], True: []}
        for flush in (False, True):  # warm-up
            torch.set_flush_denormal(flush)
            step(model, x, y)
        for _ in range(args.reps):
            for flush in (False, True):
                torch.set_flush_denormal(flush)
                times[flush].append(step(model, x, y))
        kept, flushed = median_high(times[False]) * 1e3, median_high(times[True]) * 1e3
        print(f"{name:10s} {kept:9.1f} {flushed:11.1f} {kept / flushed:15.2f}")
    torch.set_flush_denormal(True)


if __name__ == "__main__":
    main()
