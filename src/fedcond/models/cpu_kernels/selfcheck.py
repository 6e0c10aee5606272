"""Each kernel against the stock torch layers it replaces, timed on this machine; the faster is kept.

Why: a kernel that wins on one CPU can lose on another (the 16-wide code ran 12x slower than
oneDNN on AVX2 CPUs), and torch's own layers differ by build and ISA. So the first process that
loads a build times every kernel, forward and backward together, at the shapes the paper's CNNs
use, on one thread (the engines' setting), interleaved with the stock layers so the machine's noise
hits both alike, and keeps a kernel only where its median is below the stock median. The timings
are cached beside the library (keyed by its build and the torch version); a lock makes concurrent
worker processes wait for one measurement instead of disturbing each other's.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

# name -> what it replaces and where; the shapes are those of the paper's CNNs
KERNELS = {
    "first_block": "conv 1->32, pool, ReLU at 28x28 (MNIST CNN block 1)",
    "conv_pool": "conv 32->64, pool, ReLU at 14x14 by Winograd (MNIST CNN block 2)",
    "pool_relu": "max-pool and ReLU, 32ch 28x28 + 64ch 16x16 (FiLM models, CIFAR CNN)",
    "winograd_32_32": "conv 32->32 at 32x32 by Winograd (CIFAR CNN)",
    "winograd_32_64": "conv 32->64 at 16x16 by Winograd (CIFAR CNN, FiLM MNIST)",
    "winograd_64_64": "conv 64->64 at 16x16 by Winograd (CIFAR CNN)",
}
BATCH = 32
REPS = 5
GIVE_UP = 3.0  # a kernel this many times slower than stock after the warm-up is off without more timing
CL = torch.channels_last


def _cases(batch: int) -> dict[str, tuple[Callable[[], None], Callable[[], None]]]:
    """name -> (kernel, stock): closures running forward and backward once on fixed random data."""
    from . import ConvPoolReLU, FirstBlock, PoolReLU, WinogradConv

    gen = torch.Generator().manual_seed(0)

    def rand(*shape, grad=False, cl=True):
        t = torch.randn(*shape, generator=gen)
        t = t.contiguous(memory_format=CL) if cl and t.dim() == 4 else t
        return t.requires_grad_(grad)

    def run(fn, inputs, grad):
        for t in inputs:
            t.grad = None
        fn().backward(grad)

    cases = {}
    x1, w1, b1 = rand(batch, 1, 28, 28), rand(32, 1, 3, 3, grad=True), rand(32, grad=True)
    g1 = torch.randn(batch, 32, 14, 14, generator=gen)
    cases["first_block"] = (
        lambda: run(lambda: FirstBlock.apply(x1, w1, b1), (w1, b1), g1),
        lambda: run(lambda: F.relu(F.max_pool2d(F.conv2d(x1, w1, b1, padding=1), 2), inplace=True), (w1, b1), g1))
    x2, w2, b2 = rand(batch, 32, 14, 14, grad=True), rand(64, 32, 3, 3, grad=True), rand(64, grad=True)
    g2 = torch.randn(batch, 64 * 49, generator=gen)
    cases["conv_pool"] = (
        lambda: run(lambda: ConvPoolReLU.apply(x2, w2, b2).flatten(1), (x2, w2, b2), g2),
        lambda: run(lambda: F.relu(F.max_pool2d(F.conv2d(x2, w2, b2, padding=1), 2), inplace=True).flatten(1),
                    (x2, w2, b2), g2))
    pools = [(rand(batch, c, s, s, grad=True), torch.randn(batch, c * s * s // 4, generator=gen))
             for c, s in ((32, 28), (64, 16))]

    def pool(fn):
        for x, g in pools:
            run(lambda: fn(x).flatten(1), (x,), g)

    cases["pool_relu"] = (lambda: pool(PoolReLU.apply),
                          lambda: pool(lambda x: F.relu(F.max_pool2d(x, 2), inplace=True)))
    for cin, cout, side in ((32, 32, 32), (32, 64, 16), (64, 64, 16)):
        x, w, b = rand(batch, cin, side, side, grad=True), rand(cout, cin, 3, 3, grad=True), rand(cout, grad=True)
        g = rand(batch, cout, side, side)
        cases[f"winograd_{cin}_{cout}"] = (
            lambda x=x, w=w, b=b, g=g: run(lambda: WinogradConv.apply(x, w, b), (x, w, b), g),
            lambda x=x, w=w, b=b, g=g: run(lambda: F.conv2d(x, w, b, padding=1), (x, w, b), g))
    assert list(cases) == list(KERNELS)
    return cases


def _seconds(fn: Callable[[], None]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(batch: int = BATCH, reps: int = REPS) -> dict[str, dict[str, float]]:
    """name -> {"kernel_ms", "stock_ms"}: medians of `reps` interleaved runs after one warm-up each,
    on one thread (restored afterwards)."""
    from . import _ext

    if _ext is None:
        raise RuntimeError("the CPU kernels are not loaded: nothing to time")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = {}
        for name, (kernel, stock) in _cases(batch).items():
            kernel(), stock()  # warm-up: first-touch allocations, oneDNN's primitive cache
            k, s = [_seconds(kernel)], [_seconds(stock)]
            if k[0] < GIVE_UP * s[0]:
                for _ in range(reps - 1):
                    k.append(_seconds(kernel))
                    s.append(_seconds(stock))
            out[name] = {"kernel_ms": 1e3 * sorted(k)[len(k) // 2], "stock_ms": 1e3 * sorted(s)[len(s) // 2]}
        return out
    finally:
        torch.set_num_threads(threads)


def decide(timings: dict[str, dict[str, float]]) -> dict[str, bool]:
    """A kernel is on where it was measured faster than the stock layers; one not measured is off."""
    return {name: name in timings and timings[name]["kernel_ms"] < timings[name]["stock_ms"] for name in KERNELS}


def record_path(library: Path) -> Path:
    return library.with_name(library.stem + ".selfcheck.json")


def cached_timings(library: Path) -> dict[str, dict[str, float]]:
    """The timings of this build on this machine: read from beside the library, else measured
    (once, under a lock) and written there."""
    record = record_path(library)
    key = {"library": library.name, "torch": torch.__version__, "batch": BATCH, "kernels": sorted(KERNELS),
           # what the stock layers run on: torch's dispatch level and oneDNN's cap can be lowered by the user
           "torch_isa": torch.backends.cpu.get_cpu_capability(), "onednn_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "")}

    def read():
        try:
            data = json.loads(record.read_text())
            return data["timings"] if data.get("key") == key else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    found = read()
    if found is not None:
        return found
    with _lock(library.with_name(library.stem + ".lock")):
        found = read()  # another process may have measured while this one waited
        if found is not None:
            return found
        timings = measure()
        tmp = record.with_name(f"{record.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "timings": timings}, indent=1))
        os.replace(tmp, record)
        return timings


class _lock:
    """An exclusive advisory file lock (a no-op where fcntl does not exist)."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except ImportError:
            pass
        return self

    def __exit__(self, *exc):
        os.close(self.fd)  # closing releases the lock
