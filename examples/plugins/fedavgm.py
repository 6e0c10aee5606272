"""An example plug-in: FedAvgM (Hsu et al., "Measuring the Effects of Non-Identical Data
Distribution for Federated Visual Classification", 2019), a partition of its own (`class_pairs`)
and a small MLP.

    fedcond run --plugin examples.plugins.fedavgm --scenario class_pairs --clients 20 \
        --methods FedAvg,FedAvgM --model mlp

FedAvgM is FedAvg with momentum on the server: with d_r = w_r - avg_i(w_i) the round's average
update, the server keeps v_{r+1} = beta v_r + d_r and sets w_{r+1} = w_r - server_lr v_{r+1}
(beta = 0, server_lr = 1 is FedAvg). fedcond has it built in as `FedAvg(server_opt=momentum)`;
here it is the example of a plug-in: only this module is new, it imports fedcond's public pieces
and registers its names, and nothing in fedcond changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn as nn

from fedcond.algorithms import Algorithm, Context, State
from fedcond.algorithms.base import aggregate
from fedcond.plugins import register_algorithm, register_model, register_partition


@register_algorithm("FedAvgM")
@dataclass(frozen=True)
class FedAvgM(Algorithm):
    """FedAvg with server momentum; the fields are its hyper-parameters (`FedAvgM(beta=0.7)`)."""

    beta: float = 0.9  # server momentum
    server_lr: float = 1.0

    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True

    def init(self, ctx: Context) -> State:
        w = ctx.init_params(self.conditioned)
        velocity = {k: torch.zeros_like(v) for k, v in w.items() if v.is_floating_point()}
        return State(models=(w,), assignment=(0,) * ctx.federation.num_clients, extra={"velocity": velocity})

    def round(self, ctx: Context, state: State, r: int) -> State:
        n = ctx.federation.num_clients
        w = state.models[0]
        jobs = [ctx.job(w, (i,), self.conditioned, seed=(r, i)) for i in range(n)]
        replies = aggregate(ctx, range(n), ctx.engine.train(ctx.spec(self.conditioned), jobs))
        mean = replies.average()
        velocity, new = {}, {}
        for k, avg in mean.items():
            if k not in state.extra["velocity"]:  # integer buffers (batch norm's counter): the average
                new[k] = avg
                continue
            velocity[k] = self.beta * state.extra["velocity"][k] + (w[k] - avg)
            new[k] = w[k] - self.server_lr * velocity[k]
        return State(
            models=(new,),
            assignment=state.assignment,
            round=r + 1,
            train_loss=replies.loss,
            extra={"velocity": velocity},
        )


@register_partition("class_pairs", clusters=True)
def class_pairs(labels: np.ndarray, num_classes: int, clients: int, rng: np.random.Generator):
    """Clients in num_classes // 2 clusters (client i in cluster i mod G); cluster g holds classes
    2g and 2g+1, their samples dealt at random and evenly among the cluster's clients."""
    groups = max(1, num_classes // 2)
    cluster = np.arange(clients) % groups
    parts = [np.zeros(0, dtype=np.int64) for _ in range(clients)]
    for g in range(groups):
        members = np.flatnonzero(cluster == g)
        mine = rng.permutation(np.flatnonzero(labels // 2 == g))
        for m, chunk in zip(members, np.array_split(mine, len(members))):
            parts[m] = chunk
    return parts, cluster  # one index array per client, and each client's true cluster


class MLP(nn.Module):
    """Flatten -> hidden (ReLU) -> classes: features(x) and head, so fedcond can condition it."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, hidden: int = 64):
        super().__init__()
        c, h, w = input_shape
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)  # [B, hidden]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))  # [B, K]


@register_model("mlp")
def mlp(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    return MLP(input_shape, num_classes)
