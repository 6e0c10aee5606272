"""Each kernel against the stock torch layers it replaces, timed on this machine; the faster is kept.

Why: a kernel that wins on one CPU can lose on another (the 16-wide code ran 12x slower than
oneDNN on AVX2 CPUs), and torch's own layers differ by build and ISA. So the first process that
loads a build times every kernel, forward and backward together, at the shapes the paper's CNNs
use, on one thread (the engines' setting), interleaved with the stock layers, and keeps a kernel
only where its fastest run is at least 3% below the stock layers' fastest. The fastest, not the
median: a run that another process preempts only gets slower, and on a machine busy with a sweep
the medians of 5 swung by 2x either way (Winograd 32 -> 64, 64 -> 64 and 64 -> 128 each measured
0.76-0.95x once, i.e. off, where the quiet machine measured 1.34-1.57x) while the fastest stayed
within 25% of the quiet figures and every kernel above 1.1x, the quiet decisions (AMD EPYC AVX2,
two sweeps running, four measurements).
The two fused block kernels are also timed against what would run without them (the Winograd
conv and the pool kernel, where those are kept), and must beat that too. The timings are cached
beside the library, keyed by its build, the CPU, the torch version and the ISA torch dispatches
to; a lock makes concurrent worker processes wait for one measurement instead of disturbing each
other's. `fedcond doctor --recheck` measures again.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch
import torch.nn.functional as F

# name -> what it replaces and where; the shapes are those of the paper's CNNs
KERNELS = {
    "first_block": "conv 1->32, pool, ReLU at 28x28 (MNIST CNN block 1)",
    "conv_pool": "conv 32->64, pool, ReLU at 14x14 by Winograd (MNIST CNN block 2)",
    "pool_relu": "max-pool and ReLU, 32ch 28x28 + 64ch 14x14 (FiLM-conditioned MNIST CNN)",
    "winograd_32_32": "conv 32->32 at 32x32 by Winograd (CIFAR CNN)",
    "winograd_32_64": "conv 32->64 at 16x16 by Winograd (CIFAR CNN, FiLM MNIST; JDFL light CNN blocks.1)",
    "winograd_64_64": "conv 64->64 at 16x16 by Winograd (CIFAR CNN)",
    "winograd_64_128": "conv 64->128 at 14x14 by Winograd (JDFL light CNN blocks.2)",
    "gn_pool_relu": "GroupNorm (8 groups), pool, ReLU, 32ch 56x56 + 64ch 28x28 + 128ch 14x14 (JDFL light CNN)",
}
BATCH = 32
REPS = 5
GIVE_UP = 3.0  # a kernel this many times slower than stock in two runs after the warm-up is off, untimed further
MARGIN = 0.97  # kept only where kernel time <= MARGIN x the baseline: a near tie goes to the stock layers
FUSED = {"first_block": ("pool_relu",), "conv_pool": ("winograd_32_64", "pool_relu")}  # what runs without them
CL = torch.channels_last


def _cases(layers: ModuleType, batch: int) -> dict[str, tuple[Callable[[], None], ...]]:
    """name -> (kernel, stock[, alternative]): closures running forward and backward once on fixed
    random data; the fused kernels' alternative is what runs without them (component kernels).
    `layers` is the package that defines the kernel layers, handed in by its own __init__ (this
    module does not import its parent package: no import circle)."""
    FirstBlock, PoolReLU, ConvPoolReLU = layers.FirstBlock, layers.PoolReLU, layers.ConvPoolReLU
    WinogradConv, GroupNormPoolReLU = layers.WinogradConv, layers.GroupNormPoolReLU

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
    g1 = torch.randn(batch, 32, 14, 14, generator=gen).contiguous(memory_format=CL)  # as block 2 hands it back
    cases["first_block"] = (
        lambda: run(lambda: FirstBlock.apply(x1, w1, b1), (w1, b1), g1),
        lambda: run(lambda: F.relu(F.max_pool2d(F.conv2d(x1, w1, b1, padding=1), 2), inplace=True), (w1, b1), g1),
        lambda: run(lambda: PoolReLU.apply(F.conv2d(x1, w1, b1, padding=1)), (w1, b1), g1),
    )  # without it: conv + pool kernel
    x2, w2, b2 = rand(batch, 32, 14, 14, grad=True), rand(64, 32, 3, 3, grad=True), rand(64, grad=True)
    g2 = torch.randn(batch, 64 * 49, generator=gen)
    cases["conv_pool"] = (
        lambda: run(lambda: ConvPoolReLU.apply(x2, w2, b2).flatten(1), (x2, w2, b2), g2),
        lambda: run(
            lambda: F.relu(F.max_pool2d(F.conv2d(x2, w2, b2, padding=1), 2), inplace=True).flatten(1), (x2, w2, b2), g2
        ),
        lambda: run(lambda: PoolReLU.apply(WinogradConv.apply(x2, w2, b2)).flatten(1), (x2, w2, b2), g2),
    )
    pools = [
        (rand(batch, c, s, s, grad=True), torch.randn(batch, c * s * s // 4, generator=gen))
        for c, s in ((32, 28), (64, 14))
    ]

    def pool(fn):
        for x, g in pools:
            run(lambda: fn(x).flatten(1), (x,), g)

    cases["pool_relu"] = (
        lambda: pool(PoolReLU.apply),
        lambda: pool(lambda x: F.relu(F.max_pool2d(x, 2), inplace=True)),
    )
    for cin, cout, side in ((32, 32, 32), (32, 64, 16), (64, 64, 16), (64, 128, 14)):
        x, w, b = rand(batch, cin, side, side, grad=True), rand(cout, cin, 3, 3, grad=True), rand(cout, grad=True)
        g = rand(batch, cout, side, side)
        cases[f"winograd_{cin}_{cout}"] = (
            lambda x=x, w=w, b=b, g=g: run(lambda: WinogradConv.apply(x, w, b), (x, w, b), g),
            lambda x=x, w=w, b=b, g=g: run(lambda: F.conv2d(x, w, b, padding=1), (x, w, b), g),
        )
    norms = [
        (rand(batch, c, s, s, grad=True), rand(c, grad=True), rand(c, grad=True), rand(batch, c, s // 2, s // 2))
        for c, s in ((32, 56), (64, 28), (128, 14))
    ]

    def norm_pool(fn):
        for x, w, b, g in norms:
            run(lambda: fn(x, w, b), (x, w, b), g)

    cases["gn_pool_relu"] = (
        lambda: norm_pool(lambda x, w, b: GroupNormPoolReLU.apply(x, w, b, 8, 1e-5)),
        lambda: norm_pool(lambda x, w, b: F.relu(F.max_pool2d(F.group_norm(x, 8, w, b), 2))),
    )
    assert list(cases) == list(KERNELS)
    return cases


def _seconds(fn: Callable[[], None]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(layers: ModuleType, batch: int = BATCH, reps: int = REPS) -> dict[str, dict[str, float]]:
    """name -> {"kernel_ms", "stock_ms"[, "alternative_ms"]}: the fastest of `reps` interleaved runs
    after one warm-up each (of two, where the kernel's two were over GIVE_UP x slower), on one thread
    (restored afterwards), with autograd on whatever the caller's mode."""
    if layers._ext is None:
        raise RuntimeError("the CPU kernels are not loaded: nothing to time")
    reps = max(reps, 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.enable_grad():
            out = {}
            for name, fns in _cases(layers, batch).items():
                for fn in fns:  # warm-up: first-touch allocations, oneDNN's primitive cache
                    fn()
                times: list[list[float]] = [[] for _ in fns]
                for rep in range(reps):
                    if rep == 2 and min(times[0]) > GIVE_UP * min(times[1]):
                        break  # hopeless (the 16-wide code on AVX2 ran 37-40x slower): spare the rest
                    for fn, ts in zip(fns, times):
                        ts.append(_seconds(fn))
                out[name] = dict(zip(("kernel_ms", "stock_ms", "alternative_ms"), (1e3 * min(ts) for ts in times)))
            return out
    finally:
        torch.set_num_threads(threads)


def decide(timings: dict[str, dict[str, float]]) -> dict[str, bool]:
    """A kernel is on where it was measured at least 3% faster than the stock layers and, for a
    fused block kernel, than the path that runs without it (its component kernels, where those are
    on); a kernel not measured is off."""

    def faster(name: str, baseline: float) -> bool:
        return timings[name]["kernel_ms"] <= MARGIN * baseline

    on = {name: name in timings and name not in FUSED and faster(name, timings[name]["stock_ms"]) for name in KERNELS}
    for name, parts in FUSED.items():
        if name not in timings:
            continue
        baseline = timings[name]["stock_ms"]
        if all(on.get(p) for p in parts) and "alternative_ms" in timings[name]:
            baseline = min(baseline, timings[name]["alternative_ms"])
        on[name] = faster(name, baseline)
    return on


def record_key(library: Path) -> dict:
    """What the timings depend on: the build, this CPU, torch and what the stock layers run on."""
    from .build import cpu_flags, cpu_model

    flags = hashlib.sha1(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:12]
    return {
        "library": library.name,
        "cpu": cpu_model(),
        "cpu_flags": flags,
        "torch": torch.__version__,
        "batch": BATCH,
        "kernels": sorted(KERNELS),
        "statistic": "fastest",  # records of medians: measure again
        # torch's dispatch level and oneDNN's cap can be lowered by the user
        "torch_isa": torch.backends.cpu.get_cpu_capability(),
        "onednn_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", ""),
    }


def record_path(library: Path, key: dict | None = None) -> Path:
    """One record per key, beside the library: two environments sharing a cache keep their own."""
    key = record_key(library) if key is None else key
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return library.with_name(f"{library.stem}.selfcheck.{digest}.json")


def cached_timings(library: Path, layers: ModuleType) -> dict:
    """{"timings", "measured_at", "cached"} of this build on this machine: read from beside the
    library, else measured (once, under a lock) and written there."""
    from .build import file_lock

    key = record_key(library)
    record = record_path(library, key)

    def read():
        try:
            data = json.loads(record.read_text())
            return {**data, "cached": True} if data.get("key") == key else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    found = read()
    if found is not None:
        return found
    with file_lock(library.with_name(library.stem + ".selfcheck.lock")):
        found = read()  # another process may have measured while this one waited
        if found is not None:
            return found
        print("fedcond: timing the CPU kernels against torch's layers (once per build; a few seconds)", file=sys.stderr)
        data = {"key": key, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "timings": measure(layers)}
        tmp = record.with_name(f"{record.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, record)
        return {**data, "cached": False}
