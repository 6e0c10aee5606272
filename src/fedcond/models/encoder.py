"""The small ResNet behind the "cross-trained" CIFAR encoder (SPEC A.2).

stem Conv(3->32) BN ReLU                        [B, 32, 32, 32]
stage 1: residual block(s) 32 -> 64, stride 2   [B, 64, 16, 16]
stage 2: residual block(s) 64 -> 128, stride 2  [B, 128, 8, 8]
global average pooling                          [B, 128]   <- embed(x)
linear head 128 -> K                            [B, K]     (training only)

Residual blocks are the basic two-conv kind (3x3 conv BN ReLU 3x3 conv BN, add, ReLU) with a
1x1 conv + BN projection shortcut wherever the shape changes. Inputs are uint8 [B, 3, 32, 32];
normalisation happens inside the model, with the per-channel mean/std of the training data
stored alongside the weights.

Dimension letters: B batch, C channels, H/W height/width, K classes.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .layers import Normalise

EMBED_DIM = 128
STAGE_CHANNELS = (32, 64, 128)  # stem, stage 1, stage 2


class BasicBlock(nn.Module):
    """Two 3x3 convs with batch norm, plus an identity or a 1x1-projection shortcut."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))  # [B, cout, H/stride, W/stride]
        h = self.bn2(self.conv2(h))  # [B, cout, H/stride, W/stride]
        return F.relu(h + self.shortcut(x))  # [B, cout, H/stride, W/stride]


def _stage(cin: int, cout: int, blocks: int) -> nn.Sequential:
    """The first block changes the width and halves the resolution; the rest keep both."""
    return nn.Sequential(BasicBlock(cin, cout, stride=2), *(BasicBlock(cout, cout) for _ in range(blocks - 1)))


class CrossEncoder(nn.Module):
    """The encoder network: ``embed(x)`` gives the 128-d features, ``forward(x)`` the training logits."""

    def __init__(self, num_classes: int, blocks_per_stage: int = 1, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25)):
        super().__init__()
        if blocks_per_stage < 1:
            raise ValueError(f"blocks_per_stage must be at least 1, got {blocks_per_stage}")
        c0, c1, c2 = STAGE_CHANNELS
        self.num_classes, self.blocks_per_stage = int(num_classes), int(blocks_per_stage)
        self.mean, self.std = tuple(float(m) for m in mean), tuple(float(s) for s in std)
        self.normalise = Normalise(self.mean, self.std)
        self.stem = nn.Sequential(nn.Conv2d(3, c0, 3, padding=1, bias=False), nn.BatchNorm2d(c0), nn.ReLU())
        self.stage1 = _stage(c0, c1, blocks_per_stage)
        self.stage2 = _stage(c1, c2, blocks_per_stage)
        self.head = nn.Linear(c2, num_classes)

    def config(self) -> dict:
        """What it takes to rebuild this network (saved next to the weights)."""
        return {
            "num_classes": self.num_classes,
            "blocks_per_stage": self.blocks_per_stage,
            "mean": list(self.mean),
            "std": list(self.std),
        }

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """uint8 (or float in [0, 1]) [B, 3, 32, 32] -> [B, 128]."""
        h = self.normalise(x)  # [B, 3, 32, 32]
        h = self.stem(h)  # [B, 32, 32, 32]
        h = self.stage1(h)  # [B, 64, 16, 16]
        h = self.stage2(h)  # [B, 128, 8, 8]
        return h.mean(dim=(2, 3))  # [B, 128]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x))  # [B, K]
