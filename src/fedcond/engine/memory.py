"""Keep freed memory in the process instead of handing it back to the OS.

glibc returns large freed blocks to the OS (mmap'd blocks, and the heap top above a trim
threshold), so every training step's multi-MB activations and gradients came back as fresh pages
and paid ~75-500 page faults a step. Raising both thresholds once makes the allocator reuse its
blocks: no faults, ~5% faster steps of the MNIST CNN on these CPUs. The resident size stays at
its peak, which a training process reaches every step anyway. Linux/glibc only; a no-op elsewhere.
"""

from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters, <malloc.h>
_done = False


def keep_freed_memory(mmap_threshold: int = 256 << 20, trim_threshold: int = 1 << 30) -> bool:
    """Set glibc's mmap and trim thresholds (once per process); True where it took effect."""
    global _done
    if _done:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, Windows, musl without mallopt)
        return False
    _done = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold))
    return _done
