"""The paper's CNNs (SPEC A.3), optionally conditioned on the client statistics s.

Conditioning:
- concat (the paper): s is concatenated to the flattened conv features before the FC layers;
- film (ablation): s predicts a per-channel (1 + gamma, beta) for every conv block's output.
  Where every sample of a batch has the same s (one client's batch, as federated clients train and
  every client is evaluated), the modulation is folded into the conv's weights and bias, so the
  modulated block runs as one plain conv block (the compiled kernels included): the same function
  to float rounding, without the two passes over the conv output forward and four backward
  (FEDCOND_FILM_FOLD=0 keeps the modulation as a separate step).
With stat_dim = 0 the network is the baselines' plain backbone.

Dimension letters: B batch, C channels, H/W height/width, L statistics width, K classes.
"""

from __future__ import annotations

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import FedcondError
from . import cpu_kernels
from .layers import Normalise

CONDITIONINGS = ("concat", "film")
FILM_FOLD_ENV = "FEDCOND_FILM_FOLD"  # "0": FiLM modulates the conv output as a step of its own


def _one_client(s: torch.Tensor) -> bool:
    """Whether FiLM can fold into the convs for this batch: every row of s [B, L] is the same (one
    client's batch), on the CPU and outside torch.func transforms (the check reads the values)."""
    if os.environ.get(FILM_FOLD_ENV, "1").strip() == "0" or s.device.type != "cpu":
        return False
    if torch._C._functorch.is_functorch_wrapped_tensor(s):
        return False
    return s.shape[0] == 1 or (s.shape[0] > 1 and torch.equal(s, s[:1].expand_as(s)))  # an empty batch: no fold


class ConditionedCNN(nn.Module):
    """Conv blocks -> flatten -> [concat s] -> FC hidden -> FC classes."""

    def __init__(
        self,
        blocks: nn.ModuleList,
        block_channels: list[int],
        flat: int,
        hidden: int,
        num_classes: int,
        stat_dim: int,
        conditioning: str,
        mean,
        std,
    ):
        super().__init__()
        if conditioning not in CONDITIONINGS:
            raise FedcondError(f"unknown conditioning '{conditioning}'; choose {' or '.join(CONDITIONINGS)}")
        self.stat_dim, self.conditioning = stat_dim, conditioning
        self.normalise = Normalise(mean, std)
        self.blocks = blocks
        use_film = stat_dim > 0 and conditioning == "film"
        self.film = nn.ModuleList(nn.Linear(stat_dim, 2 * c) for c in block_channels) if use_film else None
        concat = stat_dim if (stat_dim > 0 and conditioning == "concat") else 0
        self.fc1 = nn.Linear(flat + concat, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)
        if self.film is not None:  # start as the identity modulation
            for lin in self.film:
                nn.init.zeros_(lin.weight)
                nn.init.zeros_(lin.bias)

    def features(self, x: torch.Tensor, s: torch.Tensor | None = None) -> torch.Tensor:
        """The FC-hidden representation [B, hidden] (used by prototype methods)."""
        h = self.normalise(x)  # [B, C, H, W]
        fold = self.film is not None and _one_client(s)
        for i, block in enumerate(self.blocks):
            if self.film is None:
                h = block(h)
            elif fold and block.foldable:
                gamma, beta = self.film[i](s[:1]).chunk(2, dim=1)  # [1, C_i] each: one client's
                h = block.modulated(h, 1 + gamma[0], beta[0])
            else:
                gamma, beta = self.film[i](s).chunk(2, dim=1)  # [B, C_i] each
                h = block.finish(block.conv(h) * (1 + gamma[:, :, None, None]) + beta[:, :, None, None])
        h = h.flatten(1)  # [B, flat]
        if self.stat_dim > 0 and self.conditioning == "concat":
            h = torch.cat([h, s.to(h.dtype)], dim=1)  # [B, flat + L]
        return F.relu(self.fc1(h), inplace=True)  # in place: fc1's backward needs its input, not its output

    def use_cpu_kernels(self) -> "ConditionedCNN":
        """Run the conv-pool-ReLU blocks through the compiled CPU kernels (models/cpu_kernels)
        where each is built and was measured faster than the stock layers on this machine: Conv
        1->32 blocks as one kernel and Conv 32->64 blocks by Winograd (for FiLM models, where the
        modulation folds into the conv: one client's batch); any other block, and a FiLM block
        modulated as a step of its own, gets the MaxPool-ReLU kernel; every other 3x3 conv of 32/64
        channels (the CIFAR CNN's, FiLM-modulated ones) runs by Winograd. Same parameters,
        state_dict and function (to float rounding)."""
        for i, block in enumerate(self.blocks):
            if isinstance(block.rest, _PoolReLU):
                block.kernel = cpu_kernels.block_kernel(i == 0, block.conv)
        for m in self.modules():  # convs no block kernel covers: CIFAR's, FiLM-modulated ones
            if isinstance(m, _Conv2d):
                m.winograd = cpu_kernels.winograd_on(m)
        return self

    @property
    def head(self) -> nn.Linear:
        """The classifier layer on top of `features` (every backbone names it `head`)."""
        return self.fc2

    def forward(self, x: torch.Tensor, s: torch.Tensor | None = None) -> torch.Tensor:
        if self.stat_dim > 0 and s is None:
            raise ValueError("this model is conditioned: pass the client statistics s [B, L]")
        return self.fc2(self.features(x, s))  # [B, K]


class _Block(nn.Module):
    """A conv (the FiLM hook sits right after it) and what follows it in the block."""

    def __init__(self, conv: nn.Module, rest: nn.Module):
        super().__init__()
        self.conv, self.rest = conv, rest
        self.kernel: str | None = (
            None  # "first" | "conv_pool" | "pool": a compiled CPU kernel runs it (use_cpu_kernels)
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """The unmodulated block."""
        if not self.foldable:
            return self.finish(self.conv(h))
        return self._with_weights(h, self.conv.weight, self.conv.bias)

    def _with_weights(self, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """The block with its conv's weight and bias given: "first": conv, pool and ReLU in one kernel (its
        input is the data); "conv_pool": the fused Winograd block; else the conv, then `finish`."""
        if self.kernel == "first" and not h.requires_grad and cpu_kernels.usable(h, w, b):
            return cpu_kernels.FirstBlock.apply(h, w, b)
        if self.kernel == "conv_pool" and cpu_kernels.usable(h, w, b):
            return cpu_kernels.ConvPoolReLU.apply(h, w, b)
        return self.finish(self.conv.with_weights(h, w, b))

    @property
    def foldable(self) -> bool:
        """Whether a per-channel affine of the conv's output can fold into its weights: a plain conv
        (the CIFAR CNN's blocks modulate after batch norm, which would need its own fold)."""
        return isinstance(self.conv, _Conv2d)

    def modulated(self, h: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        """The block of finish(conv(h) * scale + shift) for one scale and shift [C_out] per batch
        (FiLM on one client's batch), computed as the conv with weight * scale, bias * scale + shift:
        the same function to float rounding, and the fused kernels run it like an unmodulated block.
        The gradients reach the weights, scale and shift through the two small products."""
        w = self.conv.weight * scale[:, None, None, None]  # [C_out, C_in, 3, 3]
        return self._with_weights(h, w, self.conv.bias * scale + shift)

    def finish(self, h: torch.Tensor) -> torch.Tensor:
        """What follows the conv (and FiLM's modulation): the compiled pool kernel where switched on."""
        if (
            self.kernel and cpu_kernels.usable(h) and cpu_kernels.enabled("pool_relu")
        ):  # usable first: never builds here
            return cpu_kernels.PoolReLU.apply(h)
        return self.rest(h)


class _Conv2d(nn.Conv2d):
    """nn.Conv2d (same parameters and state_dict) that runs through the compiled Winograd CPU
    kernel where use_cpu_kernels switched it on and the input allows (CPU float32, even sides)."""

    winograd = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.with_weights(x, self.weight, self.bias)

    def with_weights(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """This conv with the given weight and bias (FiLM folds its modulation into them)."""
        if self.winograd and cpu_kernels.usable(x, weight, bias):
            return cpu_kernels.WinogradConv.apply(x, weight, bias)
        return self._conv_forward(x, weight, bias)


class _PoolReLU(nn.Sequential):
    """MaxPool 2 then ReLU (its own class, so use_cpu_kernels can recognise it)."""


def _pool_relu() -> _PoolReLU:
    """MaxPool then ReLU: the same function and gradients as ReLU then MaxPool (ReLU is monotone, so
    it commutes with max), but the elementwise work runs on 4x fewer values: 1.46x faster training
    of the MNIST CNN on these CPUs. In-place is safe: max-pool's backward needs only its indices."""
    return _PoolReLU(nn.MaxPool2d(2), nn.ReLU(inplace=True))


def mnist_cnn(
    num_classes: int = 10, stat_dim: int = 0, conditioning: str = "concat", mean=(0.1307,), std=(0.3081,)
) -> ConditionedCNN:
    """28x28 grey: Conv(1->32) ReLU Pool -> Conv(32->64) ReLU Pool -> 3136 [+L] -> 128 -> K."""
    blocks = nn.ModuleList(
        [
            _Block(_Conv2d(1, 32, 3, padding=1), _pool_relu()),  # [B, 32, 14, 14]
            _Block(_Conv2d(32, 64, 3, padding=1), _pool_relu()),  # [B, 64, 7, 7]
        ]
    )
    return ConditionedCNN(blocks, [32, 64], 64 * 7 * 7, 128, num_classes, stat_dim, conditioning, mean, std)


def cifar_cnn(
    num_classes: int = 10,
    stat_dim: int = 0,
    conditioning: str = "concat",
    mean=(0.4914, 0.4822, 0.4465),
    std=(0.2470, 0.2435, 0.2616),
) -> ConditionedCNN:
    """32x32 RGB, batch norm after each conv: [Conv Conv Pool] x 2 (32, 64 channels) -> 4096 [+L] -> 256 -> K.

    Each block's first conv is the FiLM hook; ReLU follows each batch norm.
    """

    def conv_bn(cin, cout):
        return nn.Sequential(_Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout))

    blocks = nn.ModuleList(
        [
            _Block(
                conv_bn(3, 32), nn.Sequential(nn.ReLU(inplace=True), conv_bn(32, 32), _pool_relu())
            ),  # [B, 32, 16, 16]
            _Block(
                conv_bn(32, 64), nn.Sequential(nn.ReLU(inplace=True), conv_bn(64, 64), _pool_relu())
            ),  # [B, 64, 8, 8]
        ]
    )
    return ConditionedCNN(blocks, [32, 64], 64 * 8 * 8, 256, num_classes, stat_dim, conditioning, mean, std)
