"""JDFL's light CNN (SPEC C.6): three conv blocks with GroupNorm, two hidden FC layers, the head.

The authors found ResNet-18 overfits PACS and Office-Caltech; they give no widths, so ours are:
  block 0: Conv 5x5 stride 2 (3 -> 32), GN, MaxPool 2, ReLU     112 -> 56 -> 28
  block 1: Conv 3x3 (32 -> 64), GN, MaxPool 2, ReLU              28 -> 14
  block 2: Conv 3x3 (64 -> 128), GN, MaxPool 2, ReLU             14 -> 7
  flatten 128 x 7 x 7 = 6272 [+ L] -> FC 256 -> FC 128 -> head (K outputs; JDFL's K = M x C).
The stride-2 first convolution keeps a forward pass at ~65 MFLOP for 112 px inputs (a CPU can
train it at a few hundred samples per second per core). GroupNorm (8 groups) instead of
BatchNorm: no running statistics to average across domains, and it works at any batch size.
ReLU comes after the pool: the same function as ReLU before it, forward and backward, bit for bit
(max commutes with the monotone ReLU; where a window's max is <= 0 both orders pass no gradient),
on a quarter of the elements (benchmarks/light_cnn.py times both orders as the engines run them,
channels-last).
The CPU engines run GroupNorm, pool and ReLU of each block as one compiled kernel, and the convs
of blocks.1 (32 -> 64) and blocks.2 (64 -> 128) by Winograd, where this machine's self-check finds
them faster (use_cpu_kernels; models/cpu_kernels).
Parameter names are stable (`blocks.0..2`, `fc1`, `fc2`, `head`): JDFL's discovery picks its
layer subsets by them.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import FedcondError
from . import cpu_kernels
from .layers import Normalise

GROUPS = 8
WIDTHS = (32, 64, 128)
HIDDEN = (256, 128)


def _block(cin: int, cout: int, kernel: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2),
        nn.GroupNorm(GROUPS, cout),
        nn.MaxPool2d(2),
        nn.ReLU(inplace=True),
    )


class LightCNN(nn.Module):
    def __init__(
        self,
        input_shape: tuple[int, int, int],
        num_classes: int,
        stat_dim: int = 0,
        mean=(0.5, 0.5, 0.5),
        std=(0.25, 0.25, 0.25),
    ):
        super().__init__()
        c, h, w = input_shape
        if h % 16 or w % 16:
            raise FedcondError(f"the light CNN needs image sides divisible by 16, got {h}x{w}")
        self.stat_dim = stat_dim
        self.normalise = Normalise(mean, std)
        self.blocks = nn.ModuleList(
            [
                _block(c, WIDTHS[0], 5, 2),  # [B, 32, H/4, W/4]
                _block(WIDTHS[0], WIDTHS[1], 3, 1),  # [B, 64, H/8, W/8]
                _block(WIDTHS[1], WIDTHS[2], 3, 1),  # [B, 128, H/16, W/16]
            ]
        )
        flat = WIDTHS[2] * (h // 16) * (w // 16)
        self.fc1 = nn.Linear(flat + stat_dim, HIDDEN[0])
        self.fc2 = nn.Linear(HIDDEN[0], HIDDEN[1])
        self.head = nn.Linear(HIDDEN[1], num_classes)
        self.kernels = [(False, False)] * len(self.blocks)  # per block: (Winograd conv, GroupNorm-pool-ReLU kernel)

    def use_cpu_kernels(self) -> "LightCNN":
        """Run the blocks through the compiled CPU kernels (models/cpu_kernels) where each is built
        and was measured faster than the stock layers on this machine: GroupNorm, MaxPool and ReLU
        as one kernel, and the 3x3 convs 32 -> 64 and 64 -> 128 by Winograd. Same parameters,
        state_dict and function (to float rounding)."""
        self.kernels = [
            (cpu_kernels.winograd_on(conv), cpu_kernels.group_norm_pool_on(norm))
            for conv, norm, _pool, _relu in self.blocks
        ]
        return self

    def _block(self, i: int, h: torch.Tensor) -> torch.Tensor:
        conv, norm, pool, relu = self.blocks[i]
        winograd, fused = self.kernels[i]
        if winograd and cpu_kernels.usable(h, conv.weight, conv.bias):
            h = cpu_kernels.WinogradConv.apply(h, conv.weight, conv.bias)
        else:
            h = conv(h)
        if fused and cpu_kernels.usable(h, norm.weight, norm.bias):
            return cpu_kernels.GroupNormPoolReLU.apply(h, norm.weight, norm.bias, norm.num_groups, norm.eps)
        return relu(pool(norm(h)))

    def features(self, x: torch.Tensor, s: torch.Tensor | None = None) -> torch.Tensor:
        """The representation fed to the head [B, 128] (FedProc's prototypes live here)."""
        h = self.normalise(x)
        for i in range(len(self.blocks)):
            h = self._block(i, h)
        h = h.flatten(1)
        if self.stat_dim > 0:
            h = torch.cat([h, s.to(h.dtype)], dim=1)
        h = F.relu(self.fc1(h), inplace=True)
        return F.relu(self.fc2(h), inplace=True)

    def forward(self, x: torch.Tensor, s: torch.Tensor | None = None) -> torch.Tensor:
        if self.stat_dim > 0 and s is None:
            raise ValueError("this model is conditioned: pass the client statistics s [B, L]")
        return self.head(self.features(x, s))  # [B, K]
