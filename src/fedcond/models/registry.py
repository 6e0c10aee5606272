"""Every network by name: the built-in backbones and those a plug-in registers
(fedcond.plugins.register_model). Each entry builds from a ModelSpec's fields; a run names one
with the protocol's `model` (`--model NAME`), or leaves it None for the choice by input shape
(models.spec.model_for)."""

from __future__ import annotations

from typing import Callable

import torch.nn as nn

from ..errors import FedcondError
from ..plugin_loading import load_entry_points
from .cnn import cifar_cnn, mnist_cnn
from .light_cnn import LightCNN

# (input_shape, num_classes, stat_dim, conditioning, mean, std) -> the network; mean None: its own default
ModelBuilder = Callable[[tuple, int, int, str, "tuple | None", "tuple | None"], nn.Module]


def _norm(mean, std) -> dict:
    return {} if mean is None else {"mean": tuple(mean), "std": tuple(std)}


def _shape_check(name: str, shape: tuple, want: tuple) -> None:
    if tuple(shape) != want:
        raise FedcondError(f"model {name} takes input shape {want}, not {tuple(shape)}")


def _mnist_cnn(shape, num_classes, stat_dim, conditioning, mean, std) -> nn.Module:
    _shape_check("mnist_cnn", shape, (1, 28, 28))
    return mnist_cnn(num_classes, stat_dim, conditioning, **_norm(mean, std))


def _cifar_cnn(shape, num_classes, stat_dim, conditioning, mean, std) -> nn.Module:
    _shape_check("cifar_cnn", shape, (3, 32, 32))
    return cifar_cnn(num_classes, stat_dim, conditioning, **_norm(mean, std))


def _light_cnn(shape, num_classes, stat_dim, conditioning, mean, std) -> nn.Module:
    if conditioning != "concat":
        raise FedcondError("the light CNN takes the statistics by concatenation only")
    return LightCNN(tuple(shape), num_classes, stat_dim, **_norm(mean, std))


MODELS: dict[str, ModelBuilder] = {
    "mnist_cnn": _mnist_cnn,  # 1x28x28 (the paper's)
    "cifar_cnn": _cifar_cnn,  # 3x32x32 (the paper's)
    "light_cnn": _light_cnn,  # RGB of 64 px or more (JDFL's)
}
BUILTIN_MODELS = tuple(MODELS)


def canonical_model(name: str) -> str:
    """A model name as registered (any case); a one-line error naming the choices otherwise."""
    load_entry_points()
    lookup = {k.lower(): k for k in MODELS}
    key = str(name).strip().lower()
    if key not in lookup:
        raise FedcondError(f"unknown model '{name}'; choose from {', '.join(MODELS)}")
    return lookup[key]
