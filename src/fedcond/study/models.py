"""The earlier study's six models (SPEC Part B), and the one trainer they all go through.

Every model maps a batch of samples to one real output per sample: the prediction (linreg) or the
logit (logreg). All take the same arguments, `(x [B, D], mu [B, P], client [B], cluster [B])`,
and ignore what they do not use:

conditioned (one shared model, input mu_i = the client's eigenvector statistic, P = n_c * D):
- `conditional_linear`: y = x^T W mu, W [D, P] learned. With orthonormal cluster directions it
  represents every cluster's own linear model exactly (W u_k = w_k).
- `ensemble`: H linear heads v_h [D] blended by softmax weights predicted from mu:
  y = sum_h softmax(A mu + a)_h x^T v_h.
- `mlp`: an MLP on the concatenation [x, mu] (two ReLU hidden layers).
references (linear models, no intercept, like the generator):
- `global`: one model for every client; `cluster`: one per true cluster (oracle: it is told the
  cluster); `client`: one per client, trained on that client's data alone (local).

Training (`train`): Adam, `steps` steps, learning rate `lr` with a cosine decay to zero; each
step takes `batch_per_client` training samples (without replacement) from *every* client, so the
per-cluster and per-client models all get a gradient every step and the K or N independent
reference models train together as one batched model (their losses are a sum of independent
terms, so this equals training them one by one with Adam, up to Adam's epsilon). Loss: mean
squared error (linreg) or binary cross-entropy on the logit (logreg). float64 throughout.

Dimension letters: N clients, n samples of one client, B batch, D features, P = n_c * D, H heads.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..engine.denormals import with_mode

DTYPE = torch.float64


@dataclass(frozen=True)
class TrainConfig:
    """Optimiser and architecture settings shared by the six models (defaults: the study's)."""

    steps: int = 2000
    lr: float = 0.01  # Adam; cosine decay to 0 over `steps`
    batch_per_client: int = 10  # training samples of every client per step (all of them when larger)
    heads: int = 16  # ensemble: number of linear heads (more than the 8 clusters: spare heads ease the gating)
    hidden: int = 64  # mlp: width of both hidden layers

    def as_dict(self) -> dict:
        return asdict(self)


class GroupLinear(nn.Module):
    """One linear model per group (global: 1 group; cluster: K; client: N), no intercept."""

    def __init__(self, groups: int, features: int, by: str):
        super().__init__()
        self.by = by  # "global" | "cluster" | "client"
        self.weight = nn.Parameter(torch.zeros(groups, features, dtype=DTYPE))  # [G, D]; convex: zero init

    def forward(self, x, mu, client, cluster):
        g = {"global": torch.zeros_like(client), "cluster": cluster, "client": client}[self.by]  # [B]
        return (x * self.weight[g]).sum(-1)  # [B]


class ConditionalLinear(nn.Module):
    """y = x^T W mu."""

    def __init__(self, features: int, stat_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(features, stat_dim, dtype=DTYPE))  # [D, P]; linear in W: zero init

    def forward(self, x, mu, client, cluster):
        return torch.einsum("bd,dp,bp->b", x, self.weight, mu)  # [B]


class Ensemble(nn.Module):
    """y = sum_h softmax(A mu + a)_h x^T v_h."""

    def __init__(self, features: int, stat_dim: int, heads: int):
        super().__init__()
        self.heads = nn.Parameter(torch.randn(heads, features, dtype=DTYPE) / math.sqrt(features))  # [H, D]
        self.gate = nn.Linear(stat_dim, heads, dtype=DTYPE)  # random init breaks the heads' symmetry

    def forward(self, x, mu, client, cluster):
        blend = torch.softmax(self.gate(mu), dim=-1)  # [B, H]
        return (blend * (x @ self.heads.T)).sum(-1)  # [B]


class MLP(nn.Module):
    """An MLP on [x, mu]: (D + P) -> hidden -> hidden -> 1, ReLU."""

    def __init__(self, features: int, stat_dim: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(features + stat_dim, hidden, dtype=DTYPE),
            nn.ReLU(),
            nn.Linear(hidden, hidden, dtype=DTYPE),
            nn.ReLU(),
            nn.Linear(hidden, 1, dtype=DTYPE),
        )

    def forward(self, x, mu, client, cluster):
        return self.net(torch.cat([x, mu], dim=-1)).squeeze(-1)  # [B]


@dataclass(frozen=True)
class Shapes:
    clients: int
    clusters: int
    features: int
    stat_dim: int


# name -> builder(shapes, config); the study's table order
MODELS: dict[str, Callable[[Shapes, TrainConfig], nn.Module]] = {
    "global": lambda s, c: GroupLinear(1, s.features, "global"),
    "cluster": lambda s, c: GroupLinear(s.clusters, s.features, "cluster"),
    "client": lambda s, c: GroupLinear(s.clients, s.features, "client"),
    "conditional_linear": lambda s, c: ConditionalLinear(s.features, s.stat_dim),
    "ensemble": lambda s, c: Ensemble(s.features, s.stat_dim, c.heads),
    "mlp": lambda s, c: MLP(s.features, s.stat_dim, c.hidden),
}
REFERENCES = ("global", "cluster", "client")
CONDITIONED = ("conditional_linear", "ensemble", "mlp")


def build(name: str, shapes: Shapes, config: TrainConfig, seed: int) -> nn.Module:
    """Model `name`, initialised from its own seed (purpose: init) without touching the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(np.random.SeedSequence([0x1417, seed]).generate_state(1)[0]))
        return MODELS[name](shapes, config)


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, *t.shape[2:])  # [N, b, ...] -> [N * b, ...]


def _inputs(x, mu, cluster):
    """Per-sample model inputs for x [N, b, D]: (x [N*b, D], mu [N*b, P], client [N*b], cluster [N*b])."""
    n_clients, b = x.shape[:2]
    client = torch.arange(n_clients).repeat_interleave(b)  # [N*b]
    return _flat(x), mu.repeat_interleave(b, dim=0), client, cluster.repeat_interleave(b)


def loss_fn(task: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    return F.mse_loss if task == "linreg" else F.binary_cross_entropy_with_logits


@with_mode
def train(
    model: nn.Module,
    task: str,
    x: torch.Tensor,
    y: torch.Tensor,
    mu: torch.Tensor,
    cluster: torch.Tensor,
    config: TrainConfig,
    seed: int,
) -> float:
    """Train `model` in place on every client's training split; returns the final full training loss.

    x [N, n, D], y [N, n], mu [N, P], cluster [N] (int64).
    """
    n_clients, n = y.shape
    b = min(config.batch_per_client, n)
    gen = torch.Generator().manual_seed(
        int(np.random.SeedSequence([0xBA7C, seed]).generate_state(1)[0])
    )  # purpose: batches
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 0.5 * (1 + math.cos(math.pi * t / config.steps)))
    loss_of = loss_fn(task)
    rows = torch.arange(n_clients)[:, None]  # [N, 1]
    full = _inputs(x, mu, cluster)  # the whole training set, for the full-batch case and the final loss
    for _ in range(config.steps):
        if b < n:
            idx = torch.rand(n_clients, n, generator=gen).argsort(dim=1)[:, :b]  # [N, b] without replacement
            inputs, target = _inputs(x[rows, idx], mu, cluster), y[rows, idx].reshape(-1)  # x[rows, idx]: [N, b, D]
        else:
            inputs, target = full, y.reshape(-1)
        loss = loss_of(model(*inputs), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        return float(loss_of(model(*full), y.reshape(-1)))


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor, mu: torch.Tensor, cluster: torch.Tensor) -> torch.Tensor:
    """Model outputs [N, n] for x [N, n, D] (each client with its own mu and ids)."""
    return model(*_inputs(x, mu, cluster)).reshape(x.shape[:2])


def scores(task: str, out: torch.Tensor, y: torch.Tensor) -> tuple[np.ndarray, float]:
    """(per-client metric [N], pooled metric over all test samples): RMSE for linreg, accuracy for logreg."""
    if task == "linreg":
        sq = (out - y) ** 2  # [N, n]
        return sq.mean(dim=1).sqrt().numpy(), float(sq.mean().sqrt())
    hit = ((out > 0) == (y > 0.5)).to(DTYPE)  # [N, n]
    return hit.mean(dim=1).numpy(), float(hit.mean())
