"""Compiled CPU kernels for the paper's CNNs; the CPU engines switch them on where they are faster.

Why: on the 2-core CPUs a training step of the MNIST CNN spent half its time outside the conv
32->64 that holds 87% of its FLOPs (`benchmarks/engine.py` prints the stages), and that conv ran
at ~0.9 of a core's matmul rate in oneDNN, so only less arithmetic could make it faster.
Compositions of torch ops did not help inside a step (docs/choices.md lists what was tried), so
these stages are C++ loops vectorised over channels (kernels.cpp):
- the first block (Conv 1->32 3x3, MaxPool 2, ReLU) as one kernel: conv, pool and ReLU per
  pooled pixel, never writing the 28x28x32 conv output; its backward gives the weight and bias
  gradients directly;
- the second block (Conv 32->64 3x3, MaxPool 2, ReLU) by Winograd F(2x2, 3x3), each output tile
  pooled as it is made: 2.25x fewer multiplies in forward and both gradients;
- other 3x3 convs of 32/64 channels (the CIFAR CNN's, whose batch norms sit between conv and
  pool; FiLM-modulated ones) and the light CNN's 64 -> 128 by the same Winograd code, writing the
  conv output in full;
- MaxPool 2 + ReLU on a channels-last input, writing the flatten order (for FiLM models, whose
  modulation sits between conv and pool);
- GroupNorm + MaxPool 2 + ReLU on a channels-last input (JDFL's light CNN): torch's channels-last
  GroupNorm and its backward, with the pool's zero-fill and scatter, were ~40% of that model's
  training step; the kernel never writes the normalised image, and its backward's sums run over
  the pooled positions only, because the pool passes the gradient to one position per window.
All pick the first maximum in row-major window order, as `max_pool2d` does, so the gradients
are those of the stock layers (exact on integer data; tests check every kernel).

kernels.cpp is compiled on first use for the CPU at hand (build.py: vector width and register
blocking chosen by its ISA, ~4 s with a C++ compiler, cached in the user cache directory), then
each kernel is timed against the stock layers it replaces and kept only where it is faster
(selfcheck.py; ~1-2 s once per build and torch version, cached). `fedcond doctor` shows the outcome.
Where no compiler is found, or with FEDCOND_CPU_KERNELS=0, the models keep the stock torch layers:
the same results to float rounding. FEDCOND_CPU_KERNELS=all skips the self-check (every kernel on);
FEDCOND_CPU_KERNELS_VARIANT=avx2|portable builds another variant than native (to test or time it).
"""

from __future__ import annotations

import os
import sys
import warnings

import torch
import torch.nn.functional as F

from . import build, selfcheck

MODE_ENV, VARIANT_ENV = "FEDCOND_CPU_KERNELS", "FEDCOND_CPU_KERNELS_VARIANT"
_ext: build.Kernels | None = None  # the loaded kernels, or None: the stock layers run everywhere
_tried = False
_enabled: dict[str, bool] = {}  # kernel name (selfcheck.KERNELS) -> keep it
_status: dict = {}  # what extension() did, for `fedcond doctor` and the benchmark


OFF, ALL, AUTO = ("0", "off", "false", "no"), ("all",), ("", "1", "on", "true", "yes", "auto")


def extension() -> build.Kernels | None:
    """The compiled kernels, or None where they are switched off or cannot be built (warned once).
    The first call also decides which kernels to keep (the self-check)."""
    global _ext, _tried, _enabled
    if _tried:
        return _ext
    _tried = True
    mode = os.environ.get(MODE_ENV, "auto").strip().lower()
    variant = os.environ.get(VARIANT_ENV, "native").strip().lower() or "native"
    _status.clear()
    if mode not in OFF + ALL + AUTO:
        warnings.warn(f"fedcond: {MODE_ENV}={mode!r} not understood (0, auto or all); using auto", stacklevel=2)
        mode = "auto"
    mode = "0" if mode in OFF else "all" if mode in ALL else "auto"
    _status.update(mode=mode, variant=variant)
    if mode == "0":
        _status["reason"] = f"switched off by {MODE_ENV}"
        return None
    try:
        loaded = build.load(variant)
    except build.BuildError as e:  # no compiler, an unsupported platform: the stock layers still work
        warnings.warn(f"fedcond: CPU kernels not built ({e}); using the stock torch layers", stacklevel=2)
        _status["reason"] = str(e)
        return None
    _ext = loaded
    _status.update(isa=_ext.isa, vector_width=_ext.vector_width, library=str(_ext.path))
    if mode == "all":
        _enabled = dict.fromkeys(selfcheck.KERNELS, True)
        return _ext
    try:
        record = selfcheck.cached_timings(_ext.path, sys.modules[__name__])
    except (OSError, RuntimeError) as e:  # e.g. a read-only cache: without a measurement, keep the stock layers
        warnings.warn(f"fedcond: CPU kernels' self-check failed ({e}); using the stock torch layers", stacklevel=2)
        _status["reason"] = f"self-check failed: {e}"
        _enabled = {}
        return _ext
    _enabled = selfcheck.decide(record["timings"])
    _status.update(timings=record["timings"], measured_at=record.get("measured_at"), cached=record.get("cached", False))
    return _ext


def enabled(name: str) -> bool:
    """Whether the kernel `name` (a key of selfcheck.KERNELS) runs: built and not slower than stock."""
    return extension() is not None and _enabled.get(name, False)


def status() -> dict:
    """What extension() did: mode, variant, ISA, library, the self-check's timings; and per kernel on/off."""
    extension()
    return dict(_status, enabled={name: enabled(name) for name in selfcheck.KERNELS})


class FirstBlock(torch.autograd.Function):
    """relu(max_pool2d(conv2d(x, w, b, padding=1), 2)), one input channel, 32 outputs; the input
    gets no gradient (it is the data)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        xp = F.pad(x[:, 0], (1, 1, 1, 1)).contiguous()  # [B, H + 2, W + 2]
        out, idx = _ext.first_block_fwd(xp, w.detach(), b.detach())  # [B, h, v, 32] channels-last memory
        ctx.save_for_backward(xp, idx)
        return out.permute(0, 3, 1, 2)

    @staticmethod
    @torch.autograd.function.once_differentiable  # a second derivative must fail, not be silently zero
    def backward(ctx, grad: torch.Tensor):
        xp, idx = ctx.saved_tensors
        grad_w, grad_b = _ext.first_block_bwd(xp, grad.permute(0, 2, 3, 1).contiguous(), idx)
        return None, grad_w, grad_b


class PoolReLU(torch.autograd.Function):
    """relu(max_pool2d(x, 2)) for a channels-last x; the output is NCHW-contiguous (flatten is free)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        out, idx = _ext.pool_relu_fwd(x.permute(0, 2, 3, 1).contiguous())
        ctx.save_for_backward(idx)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable  # a second derivative must fail, not be silently zero
    def backward(ctx, grad: torch.Tensor):
        (idx,) = ctx.saved_tensors
        return _ext.pool_relu_bwd(grad.contiguous(), idx).permute(0, 3, 1, 2)


class ConvPoolReLU(torch.autograd.Function):
    """relu(max_pool2d(conv2d(x, w, b, padding=1), 2)) for Conv 32 -> 64, by Winograd F(2x2, 3x3)
    (kernels.cpp): 2.25x fewer multiplies than the direct conv, the same function to float rounding
    (exactly on integer data). x is channels-last; the output is NCHW-contiguous (flatten is free)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        xc = x.permute(0, 2, 3, 1).contiguous()  # [B, H, W, 32]; no copy for a channels-last x
        w = w.detach()
        out, idx = _ext.conv_pool_fwd(xc, w, b.detach())
        ctx.save_for_backward(xc, w, idx)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable  # a second derivative must fail, not be silently zero
    def backward(ctx, grad: torch.Tensor):
        xc, w, idx = ctx.saved_tensors
        grad_x, grad_w, grad_b = _ext.conv_pool_bwd(xc, w, grad.contiguous(), idx)
        return grad_x.permute(0, 3, 1, 2), grad_w, grad_b


class WinogradConv(torch.autograd.Function):
    """conv2d(x, w, b, padding=1) by Winograd F(2x2, 3x3) (kernels.cpp), for the channel pairs in
    WINOGRAD_CHANNELS: 2.25x fewer multiplies than the direct conv, the same function to float
    rounding (exactly on integer data). x and the output are channels-last."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        xc = x.permute(0, 2, 3, 1).contiguous()  # [B, H, W, C_in]; no copy for a channels-last x
        w = w.detach()
        out = _ext.winograd_conv_fwd(xc, w, b.detach())  # [B, H, W, C_out]
        ctx.save_for_backward(xc, w)
        return out.permute(0, 3, 1, 2)

    @staticmethod
    @torch.autograd.function.once_differentiable  # a second derivative must fail, not be silently zero
    def backward(ctx, grad: torch.Tensor):
        xc, w = ctx.saved_tensors
        grad_x, grad_w, grad_b = _ext.winograd_conv_bwd(xc, w, grad.permute(0, 2, 3, 1).contiguous())
        return grad_x.permute(0, 3, 1, 2), grad_w, grad_b


class GroupNormPoolReLU(torch.autograd.Function):
    """relu(max_pool2d(group_norm(x, groups, gamma, beta, eps), 2)) for a channels-last x of 32, 64
    or 128 channels (kernels.cpp): the normalised image is never written, and the backward reads x
    twice (its sums over the pooled positions, then the gradient) where torch's channels-last
    GroupNorm, pool and their backwards pass over full-size tensors ~6 times.
    The output is channels-last, as the next conv wants it."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, groups: int, eps: float) -> torch.Tensor:
        xc = x.permute(0, 2, 3, 1).contiguous()  # [B, H, W, C]; no copy for a channels-last x
        gamma = gamma.detach()
        out, idx, mean, rstd = _ext.gn_pool_relu_fwd(xc, gamma, beta.detach(), groups, eps)
        ctx.save_for_backward(xc, gamma, idx, mean, rstd)
        return out.permute(0, 3, 1, 2)

    @staticmethod
    @torch.autograd.function.once_differentiable  # a second derivative must fail, not be silently zero
    def backward(ctx, grad: torch.Tensor):
        xc, gamma, idx, mean, rstd = ctx.saved_tensors
        gin, ggamma, gbeta = _ext.gn_pool_relu_bwd(xc, gamma, grad.permute(0, 2, 3, 1).contiguous(), idx, mean, rstd)
        return gin.permute(0, 3, 1, 2), ggamma, gbeta, None, None


WINOGRAD_CHANNELS = {(32, 32), (32, 64), (64, 64), (64, 128)}  # (in, out) pairs compiled in kernels.cpp


def _plain_3x3(conv: torch.nn.Module) -> bool:
    """Conv2d 3x3, stride 1, padding 1 (zeros), no dilation or groups, with bias: what every kernel assumes."""
    return (
        isinstance(conv, torch.nn.Conv2d)
        and conv.kernel_size == (3, 3)
        and conv.stride == (1, 1)
        and conv.padding == (1, 1)
        and conv.dilation == (1, 1)
        and conv.groups == 1
        and conv.bias is not None
        and conv.padding_mode == "zeros"
    )


def winograd_fits(conv: torch.nn.Module) -> bool:
    """A conv the Winograd kernel computes: a plain 3x3 with its channels listed in WINOGRAD_CHANNELS."""
    return _plain_3x3(conv) and (conv.in_channels, conv.out_channels) in WINOGRAD_CHANNELS


def conv_pool_fits(conv: torch.nn.Module) -> bool:
    """The shape the fused Winograd block takes: a plain 3x3 conv 32 -> 64."""
    return _plain_3x3(conv) and (conv.in_channels, conv.out_channels) == (32, 64)


def first_block_fits(conv: torch.nn.Module) -> bool:
    """The one shape the first-block kernel takes: a plain 3x3 conv 1 -> 32."""
    return _plain_3x3(conv) and (conv.in_channels, conv.out_channels) == (1, 32)


def block_kernel(first: bool, conv: torch.nn.Module) -> str | None:
    """Which kernel runs a conv-pool-ReLU block: "first" (the whole first block of one input
    channel), "conv_pool" (the whole block 32 -> 64), "pool" (pool and ReLU only) or None (the
    stock layers): the first that fits and is enabled. A FiLM block modulated as a step of its own
    (not folded into the conv) uses only the pool kernel, whichever is named."""
    if first and first_block_fits(conv) and enabled("first_block"):
        return "first"
    if conv_pool_fits(conv) and enabled("conv_pool"):
        return "conv_pool"
    return "pool" if enabled("pool_relu") else None


def winograd_on(conv: torch.nn.Module) -> bool:
    """Whether this conv runs by the Winograd kernel: its shape fits and its kernel is enabled."""
    return winograd_fits(conv) and enabled(f"winograd_{conv.in_channels}_{conv.out_channels}")


GROUP_NORM_CHANNELS = {32, 64, 128}  # channel counts compiled in kernels.cpp


def group_norm_pool_on(norm: torch.nn.Module) -> bool:
    """Whether a GroupNorm followed by MaxPool 2 and ReLU runs as one kernel: an affine GroupNorm of
    32, 64 or 128 channels, with the kernel enabled."""
    return (
        isinstance(norm, torch.nn.GroupNorm)
        and norm.affine
        and norm.num_channels in GROUP_NORM_CHANNELS
        and enabled("gn_pool_relu")
    )


def usable(x: torch.Tensor, *params: torch.Tensor) -> bool:
    """The kernels run on CPU float32 tensors (x with even sides, and the layer's parameters)
    outside torch.func transforms, in a process where they are built (a model switched on
    elsewhere and unpickled here falls back to the stock layers)."""
    plain = lambda t: (  # noqa: E731
        t.device.type == "cpu" and t.dtype == torch.float32 and not torch._C._functorch.is_functorch_wrapped_tensor(t)
    )
    return (
        _ext is not None
        and plain(x)
        and x.dim() == 4
        and x.shape[2] % 2 == 0
        and x.shape[3] % 2 == 0
        and x.shape[2] * x.shape[3] > 0
        and all(plain(p) for p in params)
    )
