"""`fedcond doctor`: what this machine runs: CPU and vector ISA, torch and its build, threads,
and which compiled CPU kernels are on, with the speed-up the self-check measured for each."""

from __future__ import annotations

import json
import os
import platform
import sys


def facts(recheck: bool = False) -> dict:
    import torch

    from ..engine import denormals
    from ..models import cpu_kernels
    from ..models.cpu_kernels import build, selfcheck

    threads_before = torch.get_num_threads()
    if recheck:  # forget this build's timings: the self-check below measures again
        variant = os.environ.get(cpu_kernels.VARIANT_ENV, "native").strip().lower() or "native"
        if variant in build.VARIANTS:
            selfcheck.record_path(build.library_path(variant)).unlink(missing_ok=True)  # this environment's record
    status = cpu_kernels.status()  # builds and self-checks on first use (seconds, once per machine)
    timings = status.get("timings", {})
    kernels = {}
    for name, what in selfcheck.KERNELS.items():
        t = timings.get(name)
        kernels[name] = {
            "on": status["enabled"][name],
            "replaces": what,
            **(
                {
                    "kernel_ms": round(t["kernel_ms"], 3),
                    "stock_ms": round(t["stock_ms"], 3),
                    "speedup": round(t["stock_ms"] / t["kernel_ms"], 2),
                }
                if t
                else {}
            ),
            **({"without_it_ms": round(t["alternative_ms"], 3)} if t and "alternative_ms" in t else {}),
        }
    return {
        "cpu": build.cpu_model(),
        "machine": platform.machine(),
        "vector_isa": build.vector_isa(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": threads_before,
        "cuda": torch.cuda.is_available(),
        "denormals": denormals.apply(),
        "kernels": {
            "mode": status.get("mode"),
            "variant": status.get("variant"),
            "built_for": status.get("isa"),
            "vector_width": status.get("vector_width"),
            "library": status.get("library"),
            "not_built": status.get("reason"),
            "self_check": (
                f"batch {selfcheck.BATCH}, 1 thread, forward + backward, fastest of {selfcheck.REPS} interleaved "
                f"runs (of two where a kernel is over {selfcheck.GIVE_UP:g}x slower); on where at least "
                f"{100 * (1 - selfcheck.MARGIN):.0f}% faster"
            ),
            "measured_at": status.get("measured_at"),
            "cached": status.get("cached"),
            "each": kernels,
        },
    }


def doctor_command(args) -> int:
    info = facts(recheck=args.recheck)
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    k = info["kernels"]
    print(f"CPU              {info['cpu']} ({info['machine']}, {info['cores']} cores); vector ISA {info['vector_isa']}")
    print(
        f"torch            {info['torch']} (CPU capability {info['torch_cpu_capability']}; "
        f"{info['torch_threads']} threads by default; CUDA {'available' if info['cuda'] else 'not available'})"
    )
    print(f"python           {info['python']}")
    print(
        f"subnormal floats {info['denormals']} while training (FEDCOND_DENORMALS=keep keeps them; engine/denormals.py)"
    )
    if k["not_built"]:
        print(f"CPU kernels      not in use: {k['not_built']}; every layer is torch's own")
        return 0
    print(
        f"CPU kernels      {k['variant']} build for {k['built_for']} "
        f"({k['vector_width']}-wide vectors), mode {k['mode']}"
    )
    print(f"                 {k['library']}")
    if k["mode"] == "all":
        print("                 self-check skipped (FEDCOND_CPU_KERNELS=all): every kernel on")
    else:
        when = (
            f"measured {k['measured_at']}" + (" (cached)" if k["cached"] else " (just now)") if k["measured_at"] else ""
        )
        print(f"                 self-check: {k['self_check']}; {when}")
    for name, e in k["each"].items():
        timing = (
            f"{e['kernel_ms']:8.2f} ms against stock {e['stock_ms']:8.2f} ms = {e['speedup']:.2f}x"
            if "speedup" in e
            else ""
        )
        if "without_it_ms" in e:
            timing += f" (without it {e['without_it_ms']:.2f} ms)"
        print(f"  {name:16s} {'on ' if e['on'] else 'off'}  {timing:52s} {e['replaces']}")
    sys.stdout.flush()
    return 0
