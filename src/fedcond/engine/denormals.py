"""Subnormal floats are flushed to zero while fedcond trains and evaluates on a CPU.

Late in training, some gradients and activations fall below float32's smallest normal number
(1.2e-38). x86 CPUs handle such subnormal operands in microcode, at up to ~100x the cost of an
ordinary operation: measured here (Intel Xeon, AVX-512), one local epoch of FedDyn on PACS from
its round-85 state took 6.8-9.0 s with subnormals kept and 1.06 s flushed (a fresh model's epoch:
1.25 s), and a JDFL run's rounds slowed 3.4x after round ~70. Flushing (FTZ + DAZ, as TensorFlow
does on its CPU threads) changes values only below 1.2e-38. It is on by default; set
FEDCOND_DENORMALS=keep to compute with IEEE subnormals (every row records which: `versions`).

The mode is a per-thread CPU register (MXCSR), inherited by threads created afterwards: it is
set when fedcond.engine is imported, by the CLI before any command, and at the entry of every
training job, evaluation and trainer outside the engine (encoder, earlier study, DP-SGD), in
whatever thread runs them (worker processes, Flower and Ray actors alike). Torch's intra-op
threads created before it was set keep their own mode; fedcond trains with one thread per
process. It applies to float64 too (below 2.2e-308), far below the statistics' eigenvalues.
GPU computations are not affected (CUDA has its own rules).
"""

from __future__ import annotations

import functools
import os

import torch

from ..errors import FedcondError

ENV = "FEDCOND_DENORMALS"
MODES = ("flush", "keep")


def wanted() -> str:
    """`flush` (the default) or `keep`, from FEDCOND_DENORMALS."""
    mode = os.environ.get(ENV, "flush").strip().lower() or "flush"
    if mode not in MODES:
        raise FedcondError(f"{ENV}={os.environ[ENV]!r}: use 'flush' (the default) or 'keep'")
    return mode


def apply() -> str:
    """Set this thread's mode; returns what computes: `flushed`, `kept`, or `kept (no FTZ here)`
    where the CPU cannot flush (torch's set_flush_denormal needs SSE3)."""
    if wanted() == "keep":
        torch.set_flush_denormal(False)
        return "kept"
    return "flushed" if torch.set_flush_denormal(True) else "kept (no FTZ here)"


def with_mode(fn):
    """Decorator for whatever trains or evaluates (the engine's jobs, losses and predictions; the
    encoder, earlier study, synthetic study and DP-SGD trainers): the mode is set in whatever
    thread calls it."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        apply()
        return fn(*args, **kwargs)

    return run
