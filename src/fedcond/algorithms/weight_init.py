"""How a method's own random weights are drawn, a reading probed for the paper's collapses (issue 40):
"torch" (each layer's PyTorch default, what `Context.init_params` gives) or "glorot" (Keras's default,
as a Keras implementation of the paper would have drawn them)."""

from __future__ import annotations

import math

import numpy as np
import torch

from ..errors import FedcondError

GLOROT = 0x6107  # purpose of the random stream that draws weight_init="glorot" weights
INITS = ("torch", "glorot")


def check_weight_init(owner: str, weight_init: str) -> None:
    """One line naming the accepted draws, for a method's `weight_init` (`owner`: how its message names it)."""
    if weight_init not in INITS:
        raise FedcondError(f"{owner} weight_init must be {' or '.join(INITS)}, got {weight_init!r}")


def glorot_params(params: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Keras's default initialisation of a conv/linear network's weights: every weight of 2 or more
    dimensions ~ U(+-sqrt(6 / (fan_in + fan_out))), fan_in = in_channels x kernel area, fan_out =
    out_channels x kernel area; the biases of those layers 0; everything else (batch norm's scale
    and shift, running statistics, counters) as given."""
    g = torch.Generator().manual_seed(seed)
    out = dict(params)
    for name, t in params.items():
        if not t.is_floating_point() or t.dim() < 2:
            continue
        area = math.prod(t.shape[2:])
        bound = math.sqrt(6.0 / (t.shape[1] * area + t.shape[0] * area))
        out[name] = (torch.rand(t.shape, generator=g, dtype=torch.float64) * 2 - 1).mul(bound).to(t.dtype)
        bias = name[: -len("weight")] + "bias" if name.endswith("weight") else None
        if bias in params:
            out[bias] = torch.zeros_like(params[bias])
    return out


def draw_weights(params: dict[str, torch.Tensor], weight_init: str, seed: int, index: int) -> dict[str, torch.Tensor]:
    """`params` (the torch draw of model `index`) as `weight_init` wants them; glorot from its own seeded stream."""
    if weight_init == "torch":
        return params
    return glorot_params(params, int(np.random.SeedSequence([seed, GLOROT, index]).generate_state(1)[0]))
