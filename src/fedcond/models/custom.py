"""A network of one's own as fedcond runs it (fedcond.plugins.register_model).

The user's module sees normalised float images [B, C, H, W] (the wrapper converts the uint8 pixels
with the federation's mean and std, as the built-in networks do inside themselves). Two contracts:
- plain (default): `factory(input_shape, num_classes)`, `forward(x)`. A conditioned method needs
  `features(x) -> [B, D]` and `head` (an nn.Linear D -> K): concat replaces the head by one over
  [features, s] (D + L -> K); film modulates the features, h * (1 + gamma(s)) + beta(s), with
  gamma, beta from a linear map of s that starts at zero (the identity), then the user's head.
- conditions_itself: `factory(input_shape, num_classes, stat_dim, conditioning)`,
  `forward(x, s=None)` (s: [B, stat_dim] floats, None when stat_dim is 0).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from ..errors import FedcondError
from .layers import Normalise


class _ToFloat(nn.Module):
    """uint8 pixels -> floats in [0, 1] (a federation without a mean and std)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float().div_(255.0) if x.dtype == torch.uint8 else x


class PluginModel(nn.Module):
    """The user's network `net` behind fedcond's model interface: forward(x, s), features(x, s), head."""

    def __init__(self, name: str, net: nn.Module, stat_dim: int, conditioning: str, conditions_itself: bool, mean, std):
        super().__init__()
        self.name, self.stat_dim, self.conditioning = name, stat_dim, conditioning
        self.conditions_itself = conditions_itself
        self.normalise = _ToFloat() if mean is None else Normalise(tuple(mean), tuple(std))
        self.net = net
        self.film: nn.Linear | None = None
        if stat_dim > 0 and not conditions_itself:
            width, classes = self._head_shape(net)
            if conditioning == "concat":  # the paper's: s joins the representation the head reads
                net.head = nn.Linear(width + stat_dim, classes)
            elif conditioning == "film":
                self.film = nn.Linear(stat_dim, 2 * width)
                nn.init.zeros_(self.film.weight)  # start as the identity modulation
                nn.init.zeros_(self.film.bias)
            else:
                raise FedcondError(f"unknown conditioning '{conditioning}'; choose concat or film")

    def _head_shape(self, net: nn.Module) -> tuple[int, int]:
        """(D, K) of the user's head nn.Linear(D, K)."""
        head = getattr(net, "head", None)
        if not callable(getattr(net, "features", None)) or not isinstance(head, nn.Linear):
            raise FedcondError(
                f"model '{self.name}' cannot be conditioned: give it features(x) -> [B, D] and a head "
                "nn.Linear(D, K), or register it with conditions_itself=True (docs/extending.md)"
            )
        return head.in_features, head.out_features

    @property
    def head(self) -> nn.Module:
        """The classifier on top of `features` (FedRep, FedProc read it)."""
        head = getattr(self.net, "head", None)
        if not isinstance(head, nn.Module):
            raise FedcondError(f"model '{self.name}' has no head: this method needs features(x) and a head")
        return head

    def features(self, x: torch.Tensor, s: torch.Tensor | None = None) -> torch.Tensor:
        """The representation the head reads [B, D] (with s joined or applied where conditioned)."""
        if not callable(getattr(self.net, "features", None)):
            raise FedcondError(f"model '{self.name}' has no features(x): this method needs features(x) and a head")
        x = self.normalise(x)
        features = getattr(self.net, "features")
        if self.conditions_itself:
            return features(x, s)
        h = features(x)  # [B, D]
        if self.stat_dim == 0:
            return h
        if s is None:
            raise ValueError("this model is conditioned: pass the client statistics s [B, L]")
        if self.film is not None:
            gamma, beta = self.film(s.to(h.dtype)).chunk(2, dim=1)  # [B, D] each
            return h * (1 + gamma) + beta
        return torch.cat([h, s.to(h.dtype)], dim=1)  # [B, D + L]

    def forward(self, x: torch.Tensor, s: torch.Tensor | None = None) -> torch.Tensor:
        if self.conditions_itself:
            return self.net(self.normalise(x), s if self.stat_dim > 0 else None)
        if self.stat_dim == 0:
            return self.net(self.normalise(x))
        return self.head(self.features(x, s))  # [B, K]


def plugin_builder(name: str, factory: Callable[..., nn.Module], conditions_itself: bool = False):
    """A models.registry builder (ModelSpec's fields -> network) around the user's factory."""

    def build(shape, num_classes, stat_dim, conditioning, mean, std) -> nn.Module:
        if conditions_itself:
            net = factory(tuple(shape), num_classes, stat_dim, conditioning)
        else:
            net = factory(tuple(shape), num_classes)
        if not isinstance(net, nn.Module):
            raise FedcondError(f"model '{name}': its factory returned {type(net).__name__}, not a torch nn.Module")
        return PluginModel(name, net, stat_dim, conditioning, conditions_itself, mean, std)

    build.__name__ = f"plugin_model_{name}"
    return build
