"""JDFL's light CNN (PACS, 3 x 112 x 112): one SGD training step, ours against the literal order,
and FedProc's per-round prototype pass, ours against one whole-client batch.

  literal   conv, GroupNorm, ReLU, MaxPool per block (SPEC C.6 as written)
  ours      conv, GroupNorm, MaxPool, ReLU (models/light_cnn.py; bitwise the same function)
Both channels-last, on the stock torch layers (the compiled kernels, which fuse GroupNorm, pool and
ReLU, are timed against them by benchmarks/kernels.py). Batch 64, one thread, 28 outputs (JDFL's
M x C = 4 x 7), interleaved, median of --reps.
  prototypes  FedProc's class-feature sums over a 400-image client (a PACS client's size), on
              the model as the engines run it (engine.local_sgd.cpu_model, kernels where kept):
              algorithms.fedproc.class_feature_sums (channels-last batches of 64) against the
              whole client as one NCHW batch (what it ran before).
Run natively and, on CPUs wider than AVX2, again with torch capped to AVX2 and the kernels' avx2
build (what an AVX2 CPU would see), each in its own process. Prints per ISA
`light_cnn/<isa>: ours R.RRx faster than literal` and
`fedproc_prototypes/<isa>: batches of 64 R.RRx faster than one batch`.

Usage: python benchmarks/light_cnn.py [--reps 9]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from statistics import median_high  # the upper median: an element of the list, as timed

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "FEDCOND_CPU_KERNELS_VARIANT": "avx2"}


def child(reps: int) -> None:
    import torch
    import torch.nn.functional as F

    from fedcond.engine.local_sgd import cpu_model
    from fedcond.models import ModelSpec

    torch.set_num_threads(1)

    def literal(m, x):
        h = m.normalise(x)
        for conv, gn, _pool, _relu in m.blocks:
            h = F.max_pool2d(F.relu(gn(conv(h))), 2)
        return m.head(F.relu(m.fc2(F.relu(m.fc1(h.flatten(1))))))

    x = torch.randint(0, 256, (64, 3, 112, 112), dtype=torch.uint8).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 28, (64,))
    runs = {}
    for name, fwd in (("literal", literal), ("ours", lambda m, xx: m(xx))):
        torch.manual_seed(0)
        m = ModelSpec(input_shape=(3, 112, 112), num_classes=28).build().to(memory_format=torch.channels_last)
        runs[name] = (m, fwd, torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9), [])
    for rep in range(reps + 2):
        for m, fwd, opt, times in runs.values():
            t = time.perf_counter()
            opt.zero_grad()
            F.cross_entropy(fwd(m, x), y).backward()
            opt.step()
            if rep >= 2:  # warm-up
                times.append(time.perf_counter() - t)
    med = {k: median_high(v[3]) * 1000 for k, v in runs.items()}
    m = cpu_model(ModelSpec(input_shape=(3, 112, 112), num_classes=28))
    m.load_state_dict(runs["ours"][0].state_dict())
    med["batches"], med["whole"] = _prototype_pass(m, reps)
    print(f"{med['literal']:.1f} {med['ours']:.1f} {med['batches']:.1f} {med['whole']:.1f}")


def _prototype_pass(model, reps: int) -> tuple[float, float]:
    """Median ms of FedProc's class-feature pass over a 400-image client: ours, then one NCHW batch."""
    import torch

    from fedcond.algorithms.fedproc import class_feature_sums
    from fedcond.engine import clone_params

    x = torch.randint(0, 256, (400, 3, 112, 112), dtype=torch.uint8)  # NCHW, as a client's data is stored
    y = torch.randint(0, 7, (400,))
    params = clone_params(model.state_dict())

    def whole():
        with torch.no_grad():
            model.load_state_dict(params)
            model.eval()
            return model.features(x)

    times = {"batches": [], "whole": []}
    for rep in range(reps + 1):
        for name, fn in (("batches", lambda: class_feature_sums(model, params, x, y, None, 7)), ("whole", whole)):
            t = time.perf_counter()
            fn()
            if rep >= 1:  # warm-up
                times[name].append(time.perf_counter() - t)
    return tuple(median_high(v) * 1000 for v in times.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.reps)
        return
    from fedcond.models.cpu_kernels.build import cpu_model, vector_isa

    isa = vector_isa()
    print(f"CPU: {cpu_model()} ({isa}); batch 64, one thread, median of {args.reps}")
    for label, env in ((isa, {}), *((("avx2 (torch capped)", AVX2),) if isa == "avx512" else ())):
        out = subprocess.run([sys.executable, __file__, "--child", "--reps", str(args.reps)], env={**os.environ, **env},
                             capture_output=True, text=True, check=True).stdout.split()
        lit, ours, batches, whole = (float(v) for v in out)
        print(f"  {label}: literal {lit:.1f} ms, ours {ours:.1f} ms per step; prototype pass: batches of 64 {batches:.0f} ms, "
              f"one batch {whole:.0f} ms")
        print(f"light_cnn/{label.split()[0]}: ours {lit / ours:.2f}x faster than literal")
        print(f"fedproc_prototypes/{label.split()[0]}: batches of 64 {whole / batches:.2f}x faster than one batch")


if __name__ == "__main__":
    main()
