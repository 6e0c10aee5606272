"""Compile kernels.cpp for one ISA variant, cache the shared library, call it through ctypes.

Why plain C++ and ctypes rather than a torch extension: without torch's headers a variant compiles
in ~4 s instead of ~35 s (so the tests can build and check every variant a machine can run), and
no ninja or pybind11 is needed. The price is that argument checks live here, in Python, before
every call (a few microseconds against kernels of a millisecond or more).

Variants (VARIANTS): `native` (-march=native: the widest vectors this CPU has), `avx2`
(-march=x86-64-v3, what an AVX2-only CPU such as AMD EPYC Zen 2/3 runs; built on AVX-512 machines
too so its code can be tested and timed there) and `portable` (the compiler's baseline: SSE2 on
x86-64, NEON on ARM; 4-wide). kernels.cpp picks its vector width and register blocking from the
ISA macros of the variant it is compiled for.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import platformdirs
import torch

SOURCE = Path(__file__).with_name("kernels.cpp")
CACHE_ENV = "FEDCOND_KERNEL_CACHE"
COMMON_FLAGS = ["-O3", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=fast"]
_BASELINE = {
    "x86_64": ["-march=x86-64"],
    "AMD64": ["-march=x86-64"],
    "aarch64": ["-march=armv8-a"],
    "arm64": ["-march=armv8-a"],
}
# portable: the architecture's baseline, named explicitly (a compiler may default to more, e.g. x86-64-v3)
VARIANTS = {
    "native": ["-march=native"],
    "avx2": ["-march=x86-64-v3"],
    "portable": _BASELINE.get(platform.machine(), []),
}


class BuildError(RuntimeError):
    """The compiler is missing or failed: the caller keeps the stock torch layers."""


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux lists them (empty elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def vector_isa(flags: set[str] | None = None) -> str:
    """The widest float vector ISA of this CPU, in the names kernels.cpp reports."""
    flags = cpu_flags() if flags is None else flags
    if "avx512f" in flags:
        return "avx512"
    if "avx2" in flags and "fma" in flags:
        return "avx2"
    if "avx" in flags:
        return "avx"
    return "portable"


def buildable_variants(flags: set[str] | None = None) -> list[str]:
    """The variants this machine can build and run: native always; avx2 where the CPU has more
    than AVX2 (on an AVX2-only CPU native is that code already); portable always."""
    flags = cpu_flags() if flags is None else flags
    out = ["native"]
    if platform.machine() in ("x86_64", "AMD64") and "avx512f" in flags and {"avx2", "fma", "bmi2"} <= flags:
        out.append("avx2")
    return out + ["portable"]


def runnable(variant: str, flags: set[str] | None = None) -> bool:
    """Whether this CPU can execute the variant's code (avx2 needs AVX2, FMA and BMI2 on x86-64)."""
    flags = cpu_flags() if flags is None else flags
    if variant == "avx2":
        return platform.machine() in ("x86_64", "AMD64") and {"avx2", "fma", "bmi2"} <= flags
    return variant in VARIANTS


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV, "")
    return Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("fedcond")) / "cpu_kernels"


def library_path(variant: str) -> Path:
    """Named by everything the binary depends on: the source, the flags and (for -march=native)
    the CPU, so a cache shared between machines never hands one CPU's code to another."""
    key = hashlib.sha256()
    key.update(SOURCE.read_bytes())
    key.update(" ".join(COMMON_FLAGS + VARIANTS[variant]).encode())
    key.update(" ".join(sorted(cpu_flags())).encode() if variant == "native" else platform.machine().encode())
    return cache_dir() / f"fedcond_kernels_{variant}_{key.hexdigest()[:16]}.so"


def compile_variant(variant: str) -> Path:
    """The shared library of this variant, compiled once: under a lock, so concurrent worker
    processes wait for one build, and atomically (a crash never leaves half a library)."""
    if variant not in VARIANTS:
        raise BuildError(f"unknown kernel variant '{variant}'; choose one of {', '.join(VARIANTS)}")
    if not runnable(variant):
        raise BuildError(f"the {variant} variant does not run on this CPU (vector ISA {vector_isa()}); use native")
    path = library_path(variant)
    if path.exists():
        return path
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        raise BuildError(f"no C++ compiler ('{cxx}' not found; set CXX)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(path.with_suffix(".lock")):
            if path.exists():  # another process built it while this one waited
                return path
            # a first run's first epoch would otherwise sit silent for seconds under a wrong estimate
            print(f"fedcond: compiling the CPU kernels for this machine ({variant}; once, seconds)", file=sys.stderr)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
            os.close(fd)
            try:
                proc = subprocess.run(
                    [cxx, *COMMON_FLAGS, *VARIANTS[variant], str(SOURCE), "-o", tmp], capture_output=True, text=True
                )
                if proc.returncode != 0:
                    first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip()[:200])
                    raise BuildError(f"{cxx} failed for the {variant} variant: {first}")
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    except OSError as e:  # an unwritable cache, a compiler that cannot start
        raise BuildError(f"cannot build the {variant} variant in {path.parent}: {e}") from e
    return path


class file_lock:
    """An exclusive advisory lock on `path` (a no-op where fcntl does not exist)."""

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


def _ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


def _f32(*shape: int) -> torch.Tensor:
    return torch.empty(*shape, dtype=torch.float32)


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise RuntimeError(message)


def _plain(t: torch.Tensor) -> bool:
    return t.is_contiguous() and t.device.type == "cpu" and t.dtype == torch.float32


def _plain_idx(t: torch.Tensor) -> bool:
    return t.is_contiguous() and t.device.type == "cpu" and t.dtype == torch.uint8


@dataclass
class Kernels:
    """One loaded variant: the kernels as torch functions, each checking its arguments first."""

    variant: str
    path: Path

    def __post_init__(self):
        lib = ctypes.CDLL(str(self.path))
        P, I, D, status = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, ctypes.c_int  # noqa: E741
        # name: (argument types, return type); the int-returning kernels report a shape they refuse
        sig = {
            "fedcond_first_block_fwd": ([P] * 5 + [I] * 3, None),
            "fedcond_first_block_bwd": ([P] * 5 + [I] * 3, None),
            "fedcond_pool_relu_fwd": ([P] * 3 + [I] * 4, None),
            "fedcond_pool_relu_bwd": ([P] * 3 + [I] * 4, None),
            "fedcond_conv_pool_fwd": ([P] * 5 + [I] * 3, None),
            "fedcond_conv_pool_bwd": ([P] * 7 + [I] * 3, None),
            "fedcond_winograd_fwd": ([P] * 4 + [I] * 5, status),
            "fedcond_winograd_bwd": ([P] * 6 + [I] * 5, status),
            "fedcond_gn_pool_relu_fwd": ([P] * 7 + [I] * 5 + [D], status),
            "fedcond_gn_pool_relu_bwd": ([P] * 9 + [I] * 5, status),
        }
        for name, (args, returns) in sig.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, returns
        lib.fedcond_isa.restype = ctypes.c_char_p
        self._lib = lib
        self.isa = lib.fedcond_isa().decode()
        self.vector_width = lib.fedcond_vector_width()

    def first_block_fwd(self, xp, w, b):
        _check(xp.dim() == 3 and _plain(xp), "xp: contiguous float [B, H+2, W+2] on the CPU")
        B, H, W = xp.shape[0], xp.shape[1] - 2, xp.shape[2] - 2
        _check(H % 2 == 0 and W % 2 == 0, "first block: even sides")
        w, b = w.contiguous(), b.contiguous()
        _check(
            w.shape == (32, 1, 3, 3) and b.shape == (32,) and _plain(w) and _plain(b),
            "w: [32, 1, 3, 3]; b: [32] (float, CPU)",
        )
        out = _f32(B, H // 2, W // 2, 32)
        idx = torch.empty(B, H // 2, W // 2, 32, dtype=torch.uint8)
        self._lib.fedcond_first_block_fwd(_ptr(xp), _ptr(w), _ptr(b), _ptr(out), _ptr(idx), B, H, W)
        return out, idx

    def first_block_bwd(self, xp, g, idx):
        _check(xp.dim() == 3 and _plain(xp), "xp: contiguous float [B, H+2, W+2] on the CPU")
        B, H, W = xp.shape[0], xp.shape[1] - 2, xp.shape[2] - 2
        _check(g.shape == (B, H // 2, W // 2, 32) and _plain(g), "g: contiguous float [B, h, v, 32]")
        _check(idx.shape == g.shape and _plain_idx(idx), "idx: uint8 [B, h, v, 32] on the CPU")
        gw, gb = _f32(32, 1, 3, 3), _f32(32)
        self._lib.fedcond_first_block_bwd(_ptr(xp), _ptr(g), _ptr(idx), _ptr(gw), _ptr(gb), B, H, W)
        return gw, gb

    def pool_relu_fwd(self, x):
        _check(x.dim() == 4 and _plain(x), "x: contiguous float NHWC on the CPU")
        B, H, W, C = x.shape
        _check(H % 2 == 0 and W % 2 == 0, "even sides")
        out = _f32(B, C, H // 2, W // 2)
        idx = torch.empty(B, H // 2, W // 2, C, dtype=torch.uint8)
        self._lib.fedcond_pool_relu_fwd(_ptr(x), _ptr(out), _ptr(idx), B, H, W, C)
        return out, idx

    def pool_relu_bwd(self, g, idx):
        _check(idx.dim() == 4 and _plain_idx(idx), "idx: contiguous uint8 NHWC on the CPU")
        B, h, v, C = idx.shape
        _check(g.shape == (B, C, h, v) and _plain(g), "g: contiguous float NCHW, idx's shape")
        gin = _f32(B, 2 * h, 2 * v, C)
        self._lib.fedcond_pool_relu_bwd(_ptr(g), _ptr(idx), _ptr(gin), B, h, v, C)
        return gin

    def conv_pool_fwd(self, x, w, b):
        _check(x.dim() == 4 and _plain(x) and x.shape[3] == 32, "x: contiguous float NHWC with 32 channels on the CPU")
        _check(
            w.shape == (64, 32, 3, 3)
            and b.shape == (64,)
            and w.device.type == b.device.type == "cpu"
            and w.dtype == b.dtype == torch.float32,
            "CPU tensors; w: [64, 32, 3, 3]; b: [64]",
        )
        B, H, W, _ = x.shape
        _check(H % 2 == 0 and W % 2 == 0, "even sides")
        w, b = w.contiguous(), b.contiguous()
        out = _f32(B, 64, H // 2, W // 2)
        idx = torch.empty(B, H // 2, W // 2, 64, dtype=torch.uint8)
        self._lib.fedcond_conv_pool_fwd(_ptr(x), _ptr(w), _ptr(b), _ptr(out), _ptr(idx), B, H, W)
        return out, idx

    def conv_pool_bwd(self, x, w, g, idx):
        _check(x.dim() == 4 and _plain(x) and x.shape[3] == 32, "x: contiguous float NHWC with 32 channels")
        B, H, W, _ = x.shape
        _check(w.shape == (64, 32, 3, 3) and w.device.type == "cpu" and w.dtype == torch.float32, "w: [64, 32, 3, 3]")
        _check(g.shape == (B, 64, H // 2, W // 2) and _plain(g), "g: [B, 64, H/2, W/2]")
        _check(idx.shape == (B, H // 2, W // 2, 64) and _plain_idx(idx), "idx: uint8 [B, H/2, W/2, 64]")
        w = w.contiguous()
        gin, gw, gb = torch.empty_like(x), _f32(64, 32, 3, 3), _f32(64)
        self._lib.fedcond_conv_pool_bwd(_ptr(x), _ptr(w), _ptr(g), _ptr(idx), _ptr(gin), _ptr(gw), _ptr(gb), B, H, W)
        return gin, gw, gb

    def _conv_args(self, x, w):
        _check(
            x.dim() == 4 and _plain(x) and x.shape[1] % 2 == 0 and x.shape[2] % 2 == 0,
            "x: contiguous float NHWC on the CPU, even sides",
        )
        _check(
            w.dim() == 4
            and w.shape[1] == x.shape[3]
            and w.shape[2:] == (3, 3)
            and w.device.type == "cpu"
            and w.dtype == torch.float32,
            "w: [CO, CI, 3, 3] float on the CPU",
        )
        return (*x.shape, w.shape[0]), w.contiguous()

    def winograd_conv_fwd(self, x, w, b):
        (B, H, W, CI, CO), w = self._conv_args(x, w)
        _check(b.shape == (CO,) and b.device.type == "cpu" and b.dtype == torch.float32, "b: [CO]")
        b = b.contiguous()
        out = _f32(B, H, W, CO)
        rc = self._lib.fedcond_winograd_fwd(_ptr(x), _ptr(w), _ptr(b), _ptr(out), B, H, W, CI, CO)
        _check(rc == 0, f"Winograd conv: no kernel for {CI} -> {CO} channels")
        return out

    def winograd_conv_bwd(self, x, w, g):
        (B, H, W, CI, CO), w = self._conv_args(x, w)
        _check(g.shape == (B, H, W, CO) and _plain(g), "g: contiguous float [B, H, W, CO]")
        gin, gw, gb = torch.empty_like(x), _f32(CO, CI, 3, 3), _f32(CO)
        rc = self._lib.fedcond_winograd_bwd(_ptr(x), _ptr(w), _ptr(g), _ptr(gin), _ptr(gw), _ptr(gb), B, H, W, CI, CO)
        _check(rc == 0, f"Winograd conv: no kernel for {CI} -> {CO} channels")
        return gin, gw, gb

    def _gn_args(self, x, gamma, groups):
        _check(
            x.dim() == 4 and _plain(x) and x.shape[1] % 2 == 0 and x.shape[2] % 2 == 0 and x.shape[1] * x.shape[2] > 0,
            "x: contiguous float NHWC on the CPU, even sides, not empty",
        )
        C = x.shape[3]
        _check(
            gamma.shape == (C,) and gamma.device.type == "cpu" and gamma.dtype == torch.float32,
            "gamma: float [C] on the CPU",
        )
        _check(groups > 0 and C % groups == 0, f"GroupNorm: {C} channels do not split into {groups} groups")
        return x.shape, gamma.contiguous()

    def gn_pool_relu_fwd(self, x, gamma, beta, groups: int, eps: float):
        (B, H, W, C), gamma = self._gn_args(x, gamma, groups)
        _check(beta.shape == (C,) and beta.device.type == "cpu" and beta.dtype == torch.float32, "beta: float [C]")
        beta = beta.contiguous()
        out = _f32(B, H // 2, W // 2, C)
        idx = torch.empty(B, H // 2, W // 2, C, dtype=torch.uint8)
        mean, rstd = _f32(B, groups), _f32(B, groups)
        rc = self._lib.fedcond_gn_pool_relu_fwd(
            _ptr(x),
            _ptr(gamma),
            _ptr(beta),
            _ptr(out),
            _ptr(idx),
            _ptr(mean),
            _ptr(rstd),
            B,
            H,
            W,
            C,
            groups,
            float(eps),
        )
        _check(rc == 0, f"GroupNorm-pool-ReLU: no kernel for {C} channels")
        return out, idx, mean, rstd

    def gn_pool_relu_bwd(self, x, gamma, g, idx, mean, rstd):
        groups = mean.shape[1] if mean.dim() == 2 else 0
        (B, H, W, C), gamma = self._gn_args(x, gamma, groups)
        _check(g.shape == (B, H // 2, W // 2, C) and _plain(g), "g: contiguous float [B, H/2, W/2, C]")
        _check(idx.shape == g.shape and _plain_idx(idx), "idx: uint8 [B, H/2, W/2, C] on the CPU")
        _check(mean.shape == rstd.shape == (B, groups) and _plain(mean) and _plain(rstd), "mean, rstd: float [B, G]")
        gin, ggamma, gbeta = torch.empty_like(x), _f32(C), _f32(C)
        rc = self._lib.fedcond_gn_pool_relu_bwd(
            _ptr(x),
            _ptr(gamma),
            _ptr(g),
            _ptr(idx),
            _ptr(mean),
            _ptr(rstd),
            _ptr(gin),
            _ptr(ggamma),
            _ptr(gbeta),
            B,
            H,
            W,
            C,
            groups,
        )
        _check(rc == 0, f"GroupNorm-pool-ReLU: no kernel for {C} channels")
        return gin, ggamma, gbeta


def load(variant: str = "native") -> Kernels:
    """Compile (once) and load one variant; BuildError where that cannot be done."""
    path = compile_variant(variant)
    try:
        return Kernels(variant, path)
    except OSError as e:  # e.g. a binary for another CPU in a shared cache
        raise BuildError(f"cannot load {path.name}: {e}") from e
