"""Kernel benchmark: one training step of each CNN, compiled kernels against stock layers.

For every kernel variant this machine can build (native; avx2 on AVX-512 CPUs; portable), one
SGD step (batch 64, one thread) of the MNIST and the CIFAR CNN (conditioned on 32 statistics, as
Conditional trains them) and of JDFL's light CNN (PACS, 112 px, 28 outputs), timed three ways,
interleaved, median of --reps:
  all kernels   every kernel of the variant on (FEDCOND_CPU_KERNELS=all)
  dispatched    the engine's model: the kernels the self-check kept (FEDCOND_CPU_KERNELS=auto)
  stock         torch's own layers (channels-last, as the engine runs them)
Where a variant is narrower than the CPU (avx2 on an AVX-512 machine), torch is capped to the
same ISA (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS), so the comparison is
the one an AVX2 CPU would see. Each variant runs in its own process.

Usage: python benchmarks/kernels.py [--reps 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from statistics import median_high  # the upper median: an element of the list, as timed

# name, input shape, classes, statistics: the paper's CNNs as Conditional trains them; JDFL's light
# CNN on PACS as JDFL trains it (unconditioned, M x C = 4 x 7 outputs)
MODELS = (("MNIST CNN", (1, 28, 28), 10, 32), ("CIFAR CNN", (3, 32, 32), 10, 32), ("light CNN", (3, 112, 112), 28, 0))
CAP = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
       "portable": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}}


def child(reps: int) -> None:
    import torch
    import torch.nn.functional as F

    from fedcond.models import cpu_kernels
    from fedcond.models.cpu_kernels import selfcheck
    from fedcond.models.spec import ModelSpec

    torch.set_num_threads(1)
    status = cpu_kernels.status()
    decided = dict(status["enabled"])
    out = {"isa": status.get("isa"), "torch_isa": torch.backends.cpu.get_cpu_capability(), "decided": decided}
    for name, shape, classes, stat_dim in MODELS:
        spec = ModelSpec(shape, classes, stat_dim, "concat", (0.5,) * shape[0], (0.25,) * shape[0])
        torch.manual_seed(0)
        x = torch.randint(0, 256, (64, *shape), dtype=torch.uint8).contiguous(memory_format=torch.channels_last)
        y, s = torch.randint(0, classes, (64,)), (torch.randn(64, stat_dim) if stat_dim else None)
        steps = {}
        for how, enabled in (("all kernels", dict.fromkeys(selfcheck.KERNELS, True)), ("dispatched", decided),
                             ("stock", None)):
            model = spec.build().to(memory_format=torch.channels_last)
            if enabled is not None:
                cpu_kernels._enabled = enabled
                model.use_cpu_kernels()
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=True)

            def step(model=model, opt=opt, enabled=enabled):
                cpu_kernels._enabled = enabled or {}  # pool kernels are gated at call time too
                opt.zero_grad()
                F.cross_entropy(model(x, s), y).backward()
                opt.step()
            steps[how] = step
        cpu_kernels._enabled = decided
        times = {how: [] for how in steps}
        for rep in range(reps + 2):
            order = list(steps) if rep % 2 == 0 else list(reversed(steps))
            for how in order:
                t = time.perf_counter()
                steps[how]()
                if rep >= 2:  # the first two rounds warm up
                    times[how].append(time.perf_counter() - t)
        out[name] = {how: 1e3 * median_high(ts) for how, ts in times.items()}
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.reps)
    from fedcond.models.cpu_kernels import build

    print(f"machine: {build.cpu_model()}, vector ISA {build.vector_isa()}")
    print("one SGD step, batch 64, 1 thread (MNIST and CIFAR CNN conditioned on 32 statistics, the light CNN on PACS"
          " with 28 outputs); medians of interleaved steps, ms")
    for variant in build.buildable_variants():
        env = dict(os.environ, FEDCOND_CPU_KERNELS="auto", FEDCOND_CPU_KERNELS_VARIANT=variant)
        if variant != "native":
            env.update(CAP.get(variant, {}))
        proc = subprocess.run([sys.executable, __file__, "--child", "--reps", str(args.reps)], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{variant}: failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        off = [n for n, on in r["decided"].items() if not on]
        print(f"variant {variant} (code for {r['isa']}; stock torch at {r['torch_isa']}); self-check turned off: "
              f"{', '.join(off) or 'none'}")
        for name, *_ in MODELS:
            t = r[name]
            print(f"  {name}: all kernels {t['all kernels']:7.1f}  dispatched {t['dispatched']:7.1f}  stock {t['stock']:7.1f}"
                  f"   stock/all kernels {t['stock'] / t['all kernels']:.2f}x  stock/dispatched {t['stock'] / t['dispatched']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
