"""Layers that more than one network uses."""

from __future__ import annotations

import torch
import torch.nn as nn


class Normalise(nn.Module):
    """uint8 images -> normalised floats; lives in the model so data can stay uint8 until the batch."""

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.uint8:
            x = x.float().div_(255.0)
        return (x - self.mean) / self.std
