"""A model by its arguments: picklable, hashable, so worker processes can build their own copy."""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from .cnn import model_for


@dataclass(frozen=True)
class ModelSpec:
    input_shape: tuple[int, int, int]
    num_classes: int
    stat_dim: int = 0  # 0: the plain backbone; > 0: conditioned on s [B, stat_dim]
    conditioning: str = "concat"
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    @property
    def conditioned(self) -> bool:
        return self.stat_dim > 0

    def build(self) -> nn.Module:
        return model_for(self.input_shape, self.num_classes, self.stat_dim, self.conditioning, self.mean, self.std)
