"""A model by its arguments: picklable, hashable, so worker processes can build their own copy;
and the choice of network by input shape."""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from ..errors import FedcondError
from .cnn import cifar_cnn, mnist_cnn
from .light_cnn import LightCNN
from .registry import MODELS, canonical_model


@dataclass(frozen=True)
class ModelSpec:
    input_shape: tuple[int, int, int]
    num_classes: int
    stat_dim: int = 0  # 0: the plain backbone; > 0: conditioned on s [B, stat_dim]
    conditioning: str = "concat"
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    model: str | None = None  # a registered network by name (models.registry); None: the choice by input shape

    @property
    def conditioned(self) -> bool:
        return self.stat_dim > 0

    def build(self) -> nn.Module:
        return model_for(
            self.input_shape, self.num_classes, self.stat_dim, self.conditioning, self.mean, self.std, self.model
        )


def model_for(
    input_shape: tuple[int, int, int],
    num_classes: int,
    stat_dim: int = 0,
    conditioning: str = "concat",
    mean=None,
    std=None,
    model: str | None = None,
) -> nn.Module:
    """The network `model` names (models.registry: built-in or a plug-in's), else the backbone for
    an input shape: 1x28x28 -> mnist_cnn, 3x32x32 -> cifar_cnn (the paper's); RGB of 64 px or more
    (PACS, Office-Caltech at 112) -> JDFL's light CNN."""
    if model is not None:
        return MODELS[canonical_model(model)](tuple(input_shape), num_classes, stat_dim, conditioning, mean, std)
    kw = {} if mean is None else {"mean": tuple(mean), "std": tuple(std)}
    c, h, w = tuple(input_shape)
    if c == 3 and min(h, w) >= 64:
        if conditioning != "concat":
            raise FedcondError("the light CNN takes the statistics by concatenation only")
        return LightCNN(tuple(input_shape), num_classes, stat_dim, **kw)
    if tuple(input_shape) == (1, 28, 28):
        return mnist_cnn(num_classes, stat_dim, conditioning, **kw)
    if tuple(input_shape) == (3, 32, 32):
        return cifar_cnn(num_classes, stat_dim, conditioning, **kw)
    raise FedcondError(
        f"no backbone for input shape {tuple(input_shape)}; expected (1, 28, 28), (3, 32, 32) or RGB of 64 px or more"
    )
