"""Compiled CPU kernels for the MNIST CNN; the CPU engines switch them on.

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
  pool; FiLM-modulated ones) by the same Winograd code, writing the conv output in full;
- MaxPool 2 + ReLU on a channels-last input, writing the flatten order (for FiLM models, whose
  modulation sits between conv and pool).
All pick the first maximum in row-major window order, as `max_pool2d` does, so the gradients
are those of the stock layers (exact on integer data; tests check every kernel).

The extension is compiled on first use (torch.utils.cpp_extension: a C++ compiler and ninja,
~35 s once per machine, cached under TORCH_EXTENSIONS_DIR). Where it cannot be built, or with
FEDCOND_CPU_KERNELS=0, the models keep the stock torch layers: same results to float rounding.
"""

from __future__ import annotations

import hashlib
import os
import platform
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

_SOURCE = Path(__file__).with_name("kernels.cpp")
_ext = None
_tried = False


def _cpu_tag() -> str:
    """Names the build by the CPU's features: it is compiled with -march=native, so a cache shared
    between different machines must not hand one machine's binary to another."""
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line
                break
    except OSError:
        flags = platform.processor()
    return hashlib.sha1(flags.encode()).hexdigest()[:8]


def extension():
    """The compiled kernels, or None where they are switched off or cannot be built (warned once)."""
    global _ext, _tried
    if _tried:
        return _ext
    _tried = True
    if os.environ.get("FEDCOND_CPU_KERNELS", "1") == "0":
        return None
    try:
        from torch.utils.cpp_extension import load

        _ext = load(f"fedcond_cpu_kernels_{_cpu_tag()}", [str(_SOURCE)], extra_cflags=["-O3", "-march=native"],
                    verbose=False)
    except Exception as e:  # no compiler, no ninja, an unsupported platform: the stock layers still work
        warnings.warn(f"fedcond: CPU kernels not built ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                      "using the stock torch layers", stacklevel=2)
        _ext = None
    return _ext


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


WINOGRAD_CHANNELS = {(32, 32), (32, 64), (64, 64)}  # (in, out) pairs compiled in kernels.cpp


def _plain_3x3(conv: torch.nn.Module) -> bool:
    """Conv2d 3x3, stride 1, padding 1 (zeros), no dilation or groups, with bias: what every kernel assumes."""
    return (isinstance(conv, torch.nn.Conv2d) and conv.kernel_size == (3, 3) and conv.stride == (1, 1)
            and conv.padding == (1, 1) and conv.dilation == (1, 1) and conv.groups == 1
            and conv.bias is not None and conv.padding_mode == "zeros")


def winograd_fits(conv: torch.nn.Module) -> bool:
    """A conv the Winograd kernel computes: a plain 3x3 with its channels listed in WINOGRAD_CHANNELS."""
    return _plain_3x3(conv) and (conv.in_channels, conv.out_channels) in WINOGRAD_CHANNELS


def conv_pool_fits(conv: torch.nn.Module) -> bool:
    """The shape the fused Winograd block takes: a plain 3x3 conv 32 -> 64."""
    return _plain_3x3(conv) and (conv.in_channels, conv.out_channels) == (32, 64)


def first_block_fits(conv: torch.nn.Module) -> bool:
    """The one shape the first-block kernel takes: a plain 3x3 conv 1 -> 32."""
    return _plain_3x3(conv) and (conv.in_channels, conv.out_channels) == (1, 32)


def usable(x: torch.Tensor, *params: torch.Tensor) -> bool:
    """The kernels run on CPU float32 tensors (x with even sides, and the layer's parameters)
    outside torch.func transforms, in a process where they are built (a model switched on
    elsewhere and unpickled here falls back to the stock layers)."""
    plain = lambda t: (t.device.type == "cpu" and t.dtype == torch.float32  # noqa: E731
                       and not torch._C._functorch.is_functorch_wrapped_tensor(t))
    return (_ext is not None and plain(x) and x.dim() == 4 and x.shape[2] % 2 == 0 and x.shape[3] % 2 == 0
            and all(plain(p) for p in params))
