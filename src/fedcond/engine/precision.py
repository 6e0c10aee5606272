"""The local SGD's arithmetic: fp32 (the default, the paper's numbers) or bf16 autocast.

bf16 runs each training step's forward (and so its backward) under
`torch.autocast("cpu", dtype=torch.bfloat16)`: convolutions and matmuls in bfloat16, the
parameters, their gradients, the optimiser and batch-norm statistics stay float32 (the master
weights). It changes the numbers, so it is a protocol option recorded in every row and in the
cell's name (`paper[precision=bf16]`), never switched on by the engine by itself.
Why it is worth having: a CIFAR CNN step ran 2.1x faster under it on a CPU with AMX, and
bf16 is only fast where the CPU has bf16 instructions (avx512_bf16 or AMX); elsewhere torch
emulates it, slower than fp32, so such CPUs refuse it unless FEDCOND_FORCE_BF16=1.
"""

from __future__ import annotations

import contextlib
import os

import torch

from ..errors import FedcondError

PRECISIONS = ("fp32", "bf16")
FORCE_ENV = "FEDCOND_FORCE_BF16"


def check_name(precision: str) -> str:
    if precision not in PRECISIONS:
        raise FedcondError(f"unknown precision '{precision}'; choose {' or '.join(PRECISIONS)}")
    return precision


# ISA caps under which torch's kernels do not use the CPU's bf16 instructions (benchmarks cap to AVX2 so)
_CAPPED = {"ATEN_CPU_CAPABILITY": ("default", "avx2"), "ONEDNN_MAX_CPU_ISA": ("sse41", "avx", "avx2", "avx2_vnni")}


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX-512 BF16 or AMX), as torch detects it, and
    torch is not capped below it (ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA): capped to AVX2, a CIFAR
    step under bf16 ran 16x slower than fp32 (benchmarks/cifar_cost.py)."""
    if any(os.environ.get(var, "").strip().lower() in caps for var, caps in _CAPPED.items()):
        return False
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def check_supported(precision: str, device: str = "cpu") -> str:
    """`precision` if this machine runs it at speed; a one-line FedcondError otherwise."""
    check_name(precision)
    if precision == "fp32":
        return precision
    if device != "cpu":
        raise FedcondError(f"precision {precision} is implemented for the CPU engines only, not on {device}")
    if not cpu_has_bf16() and os.environ.get(FORCE_ENV, "").strip().lower() not in ("1", "yes", "true", "on"):
        raise FedcondError(
            "precision bf16 asked for, but torch here has neither avx512_bf16 nor AMX (not on this CPU, or "
            "capped below them by ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA) and would emulate bf16, slower "
            f"than fp32; use precision fp32, or set {FORCE_ENV}=1 to run it anyway"
        )
    return precision


def autocast(precision: str) -> contextlib.AbstractContextManager:
    """The context a training step's forward runs in: bf16 autocast, or nothing for fp32."""
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()
