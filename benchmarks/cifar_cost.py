"""What one CIFAR-10 training step and one method-epoch cost on this CPU, path by path.

The model is the one the CIFAR paper cells train for Conditional: the CIFAR CNN conditioned by
concatenation on s [B, 32] (models/spec.model_for for 3x32x32, stat_dim = num_eigenvalues; the
cells compute s with the `pacs32` encoder, whose values do not enter the timing, so a fixed random
s stands in and no encoder is trained here). Channels-last, batch 64, one thread, SGD momentum 0.9.
Paths (each a fresh model from the same seed):
  shipped        today's engine model: engine.local_sgd.cpu_model (compiled CPU kernels where the
                 self-check kept them), fp32
  stock          the stock torch layers, fp32
  compile        stock + torch.compile (inductor, CPU), fp32
  shipped+compile  cpu_model + torch.compile (the kernels are opaque to it)
  bf16           cpu_model under torch.autocast("cpu", bfloat16), fp32 master weights: what the
                 protocol option precision=bf16 runs (engine/precision.py); changes the numbers
  bf16-stock     the same on the stock layers
  bf16+compile   stock + torch.compile under bf16 autocast
Step: forward, backward, fused SGD step on one fixed batch, interleaved across paths, median of
--reps after two warm-ups (a compiled path's first step, its compilation, is printed apart).
Method-epoch: one epoch of every client of E1/cifar10/K=2/rich (10 clients; --fraction of each
client's data, 0.1 by default: 400-600 images a client) through the engine's LoopEngine (what
`--workers 1` runs), one job per client as FedAvg/Conditional round 0 sends them; median of
--epoch-reps after one warm-up epoch (compilation, recompiles for the short last batches).
Run natively and then in a child capped to AVX2 (ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2,
MKL_ENABLE_INSTRUCTIONS=AVX2 and the kernels' avx2 build, as benchmarks/kernels.py and light_cnn.py
do): what an AVX2 CPU would see; compiled paths only natively unless --avx2-compile, and bf16 (emulated
there, over 10x slower) timed by the step alone.
Ratios are against `shipped` measured in the same process. The last line reads
`cifar/today: R.RRx ...`: the shipped method-epoch time over that of the path the CIFAR grid runs on
this CPU with the options the validation adopted (bf16 where the CPU has it, else the shipped fp32
path); the line before it gives the fastest path that keeps the numbers (fp32, to float rounding).

Usage: nice -n 19 python benchmarks/cifar_cost.py [--reps 9] [--epoch-reps 3] [--fraction 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from statistics import median

AVX2 = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "FEDCOND_CPU_KERNELS_VARIANT": "avx2",
    "FEDCOND_FORCE_BF16": "1",  # timed even where the engine would refuse it
}
PATHS = ("shipped", "stock", "compile", "shipped+compile", "bf16", "bf16-stock", "bf16+compile")
STAT_DIM = 32  # Protocol.num_eigenvalues: the statistics' width under the paper protocol


def build(path: str, spec):
    """A fresh working model for `path` (same initial weights for every path)."""
    import torch

    from fedcond.engine.local_sgd import cpu_model

    torch.manual_seed(0)
    stock = "stock" in path or path in ("compile", "bf16+compile")
    model = spec.build().to(memory_format=torch.channels_last) if stock else cpu_model(spec)
    if "compile" in path:
        model.compile()  # in place: the state_dict keeps its keys, so the engine loads weights as usual
    return model


def precision_of(path: str) -> str:
    return "bf16" if path.startswith("bf16") else "fp32"


def step_times(paths, spec, reps: int) -> dict:
    """path -> {"first_s", "ms" (median), "min_ms"} of one training step at batch 64."""
    import torch
    import torch.nn.functional as F

    from fedcond.engine.precision import autocast

    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8, generator=gen)
    x = x.contiguous(memory_format=torch.channels_last)
    s, y = torch.randn(64, STAT_DIM, generator=gen), torch.randint(0, 10, (64,), generator=gen)
    runs, out = {}, {}
    for path in paths:
        model = build(path, spec)
        opt = torch.optim.SGD(list(model.parameters()), lr=0.01, momentum=0.9, fused=True)
        runs[path] = (model, opt, autocast(precision_of(path)), [])
    for rep in range(reps + 2):
        for path, (model, opt, arithmetic, times) in runs.items():
            t = time.perf_counter()
            try:
                with arithmetic:
                    loss = F.cross_entropy(model(x, s), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            except Exception as e:  # noqa: BLE001 - a path that fails is recorded, not fatal
                out[path] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
                continue
            dt = time.perf_counter() - t
            if rep == 0:
                out.setdefault(path, {})["first_s"] = dt
            elif rep >= 2:
                times.append(dt)
    for path, (_, _, _, times) in runs.items():
        if times and "error" not in out.get(path, {}):
            out[path].update(ms=1e3 * median(times), min_ms=1e3 * min(times))
    return out


def epoch_times(paths, spec, reps: int, fraction: float) -> dict:
    """path -> {"warm_s", "s" (median), "min_s", "steps"} of one method-epoch over E1/cifar10/K=2/rich's clients."""
    import torch

    from fedcond.engine import Job, LoopEngine, SGDConfig, clone_params
    from fedcond.experiments import EXPERIMENTS

    fed = EXPERIMENTS["E1/cifar10/K=2/rich"].spec(0, fraction=fraction).build().federation
    gen = torch.Generator().manual_seed(2)
    stats = torch.randn(fed.num_clients, STAT_DIM, generator=gen)
    init = clone_params(build("stock", spec).state_dict())
    jobs = [
        Job(init, c.x_train, c.y_train, stats[i].expand(len(c.y_train), -1), 1, (0, i))
        for i, c in enumerate(fed.clients)
    ]
    engines = {}
    for path in paths:
        engine = LoopEngine(SGDConfig(precision=precision_of(path)))
        engine._models[spec] = build(path, spec)  # the path's working model in place of cpu_model's
        engines[path] = (engine, [])
    out: dict = {path: {"steps": None} for path in paths}
    for rep in range(reps + 1):
        for path, (engine, times) in engines.items():
            if "error" in out[path]:
                continue
            t = time.perf_counter()
            try:
                results = engine.train(spec, jobs)
            except Exception as e:  # noqa: BLE001
                out[path]["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                continue
            dt = time.perf_counter() - t
            out[path]["steps"] = sum(r.steps for r in results)
            if rep == 0:
                out[path]["warm_s"] = dt
            else:
                times.append(dt)
    for path, (_, times) in engines.items():
        if times:
            out[path].update(s=median(times), min_s=min(times))
    return out


def child(args) -> None:
    import torch

    from fedcond.models import ModelSpec

    torch.set_num_threads(1)
    spec = ModelSpec((3, 32, 32), 10, stat_dim=STAT_DIM)
    paths = args.paths.split(",")
    result = {
        "torch_isa": torch.backends.cpu.get_cpu_capability(),
        "step": step_times(paths, spec, args.reps),
        "epoch": epoch_times([p for p in paths if p not in args.step_only.split(",")], spec, args.epoch_reps,
                             args.fraction),
    }
    print(json.dumps(result))


def report(label: str, res: dict) -> dict:
    """Print one ISA's table; return path -> epoch seconds of the paths that ran."""
    step, epoch = res["step"], res["epoch"]
    base_step = step.get("shipped", {}).get("ms")
    base_epoch = epoch.get("shipped", {}).get("s")
    print(f"  {label} (torch dispatches to {res['torch_isa']}):")
    print(f"    {'path':16s} {'step ms':>8s} {'(min)':>7s} {'vs shipped':>10s} {'epoch s':>8s} {'(min)':>7s} "
          f"{'vs shipped':>10s}  first step / warm-up epoch")
    for path in step:
        st, ep = step[path], epoch.get(path, {})
        if "error" in st or "error" in ep:
            print(f"    {path:16s} failed: {st.get('error') or ep.get('error')}")
            continue
        if path not in epoch:
            print(f"    {path:16s} {st['ms']:8.1f} {st['min_ms']:7.1f} {base_step / st['ms']:9.2f}x  (step only)")
            continue
        print(f"    {path:16s} {st['ms']:8.1f} {st['min_ms']:7.1f} {base_step / st['ms']:9.2f}x "
              f"{ep['s']:8.2f} {ep['min_s']:7.2f} {base_epoch / ep['s']:9.2f}x  "
              f"{st['first_s']:.2f} s / {ep['warm_s']:.1f} s ({ep['steps']} steps)")
    return {p: e["s"] for p, e in epoch.items() if "s" in e}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9, help="timed steps per path (after 2 warm-ups)")
    ap.add_argument("--epoch-reps", type=int, default=3, help="timed method-epochs per path (after 1 warm-up)")
    ap.add_argument("--fraction", type=float, default=0.1, help="of each client's data (1: the cells' full epoch)")
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--no-avx2", action="store_true", help="skip the AVX2-capped child")
    ap.add_argument("--avx2-compile", action="store_true", help="time the compiled paths capped to AVX2 too")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--step-only", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    from fedcond.engine.precision import cpu_has_bf16
    from fedcond.models.cpu_kernels.build import cpu_flags, cpu_model, vector_isa
    from fedcond.protocol import GRID_PRECISION

    flags = cpu_flags()
    bf16_flags = [f for f in ("avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
    print(f"CPU: {cpu_model()} ({vector_isa()}; bf16 instructions: {', '.join(bf16_flags) or 'none'}; "
          f"torch sees bf16 hardware: {cpu_has_bf16()}); {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f} at start")
    print(f"E1/cifar10/K=2/rich Conditional CNN (stat_dim {STAT_DIM}), batch 64, one thread, channels-last; "
          f"step: median of {args.reps}; epoch: 10 clients x {args.fraction:g} of their data, median of "
          f"{args.epoch_reps}")
    runs = [("native", {}, args.paths)]
    if vector_isa() == "avx512" and not args.no_avx2:
        capped = args.paths if args.avx2_compile else ",".join(p for p in args.paths.split(",") if "compile" not in p)
        runs.append(("avx2 (capped)", AVX2, capped))  # bf16 there: emulated, ~16x slower; its step says enough
    native = None
    for label, env, paths in runs:
        cmd = [sys.executable, __file__, "--child", "--reps", str(args.reps), "--epoch-reps", str(args.epoch_reps),
               "--fraction", str(args.fraction), "--paths", paths,
               "--step-only", "" if not env else ",".join(p for p in paths.split(",") if p.startswith("bf16"))]
        proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"  {label}: child failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        epochs = report(label, json.loads(proc.stdout.strip().splitlines()[-1]))
        native = epochs if native is None else native
    if not native or "shipped" not in native:
        print("cifar/today: n/a (the shipped path did not run)")
        return
    exact = {p: t for p, t in native.items() if precision_of(p) == "fp32"}
    best_exact = min(exact, key=exact.get)
    # what the CIFAR grid runs: protocol.GRID_PRECISION (bf16, adopted by the validation in docs/choices.md)
    # where the CPU has it; torch.compile was not shipped (it costs a method more than it buys back), so the
    # grid's path is `bf16` (the shipped model under autocast) on a bf16 CPU and `shipped` elsewhere
    adopted = GRID_PRECISION.get("cifar10", "fp32")
    grid = adopted if adopted in native and cpu_has_bf16() else "shipped"
    print(f"numbers kept: {native['shipped'] / native[best_exact]:.2f}x (fastest fp32 path: {best_exact})")
    print(f"cifar/today: {native['shipped'] / native[grid]:.2f}x (the CIFAR grid's path on this CPU: {grid}, "
          f"as protocol.GRID_PRECISION adopts)")


if __name__ == "__main__":
    main()
