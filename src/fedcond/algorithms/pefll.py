"""PeFLL (Scott, Zakerinia and Lampert, "PeFLL: Personalized Federated Learning by Learning to
Learn", ICLR 2024), Algorithm 1.

The server holds an embedding network E(.; psi) and a hypernetwork h(.; phi). Client i's
descriptor is the mean of per-sample embeddings of its training data,
  v_i = ( (1/n_i) sum_j E(x_j, y_j; psi) - m ) / s,
(y enters as one-hot channels beside the image; m, s: scalars fixed from the first descriptor
computed, client 0's under the initial psi, as the public code fixes them at its first step), and
its model is theta_i = h(v_i; phi), every trainable tensor of the target CNN. A server step, for
a group of `clients_per_step` clients:
  1. each client computes v_i (one forward pass of E over its data) and receives theta_i = h(v_i; phi);
  2. it runs local SGD from theta_i -> theta~_i and sends delta theta_i = theta_i - theta~_i;
  3. the server descends on (psi, phi) along the mean over the group of
       (d theta_i / d (psi, phi))^T delta theta_i
     (the gradient flows back through h and through the descriptor into E), clipped to norm
     `max_grad_norm`, with Adam (the public code's default optimiser).
A round takes every client once, in a seeded random order. Client i predicts with h(v_i; phi) of
the final (psi, phi).

One client per server step (the code's `--clients-per-step` is 5): the paper's hypernetwork takes
5000 server steps, and this protocol's 20 visits a client allow at most 20 N; with 5 clients a step
(4 N) PeFLL stays at the one-model level where N is small (E3b MNIST rich: 40 steps, .570; one
client a step, .980), and one client a step scores as well or better on every PeFLL configuration
probed (docs/choices.md, "Open for the table").

Newcomers: one forward pass, no training: v from the newcomer's own training data, theta = h(v; phi).

Networks as in the public code: E is its CNNEmbed (Conv5 16 -> pool -> Conv5 32 -> pool -> 120 ->
84 -> embed_dim, input channels = image channels + one-hot label channels); h is pFedHN's
hypernetwork (hypernet.HyperNet: hidden 100, 3 hidden layers) generating every layer of the
target CNN; embed_dim = int(1 + N/4). The descriptor uses all of a client's training samples (the
code uses one batch while training and all of them at evaluation). The server's work runs in this
process; the local training goes through the engine. Target buffers (batch-norm statistics) stay
with the client; a newcomer gets the training clients' mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..engine import Params, weighted_average
from ..errors import FedcondError
from .base import Algorithm, Context, State
from . import hypernet as H

PEFLL = 0x9E11  # names PeFLL's random streams: the networks' initialisation, the client order


class EmbedNet(nn.Module):
    """PeFLL's CNNEmbed: (uint8 images [B, C, H, W], labels [B]) -> per-sample embeddings [B, E]."""

    def __init__(self, input_shape, num_classes: int, embed_dim: int, mean, std, n_kernels: int = 16):
        super().__init__()
        c, h, w = input_shape
        self.num_classes, self.mean, self.std = num_classes, tuple(mean), tuple(std)
        self.conv1 = nn.Conv2d(c + num_classes, n_kernels, 5)
        self.conv2 = nn.Conv2d(n_kernels, 2 * n_kernels, 5)
        side = lambda a: ((a - 4) // 2 - 4) // 2  # noqa: E731 - two (conv 5, pool 2) stages
        self.fc1 = nn.Linear(2 * n_kernels * side(h) * side(w), 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, embed_dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        mean = torch.tensor(self.mean, device=x.device).view(1, -1, 1, 1)
        std = torch.tensor(self.std, device=x.device).view(1, -1, 1, 1)
        x = (x.float() / 255.0 - mean) / std  # [B, C, H, W]
        # conv1 over cat([x, one-hot(y) as K constant planes]): conv1 pads nothing, so every output position
        # sees the whole 5x5 kernel on the planes, where only y's is 1: the label adds the sum of its
        # kernel, one bias per (class, output channel). The same function without convolving K constant
        # planes (MNIST: 11 input channels -> 1, about 3x less work for E over a client's data)
        w = self.conv1.weight  # [O, C + K, 5, 5]
        label_bias = w[:, x.shape[1] :].sum(dim=(2, 3)).t()[y]  # [B, O]
        h = F.conv2d(x, w[:, : x.shape[1]], self.conv1.bias) + label_bias[:, :, None, None]
        h = F.max_pool2d(F.relu(h), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2).flatten(1)  # [B, flat]
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(h)))))  # [B, E]


@dataclass(frozen=True)
class PeFLL(Algorithm):
    embed_dim: int | None = None  # None: int(1 + N/4), the code's "auto embedding size"
    hidden: int = 100  # --hyper-hid
    n_hidden: int = 3  # --hyper-nhid
    lr: float = 2e-4  # server Adam (--optim adam, --lr)
    inner_lr: float = 2e-3  # the clients' SGD, momentum 0.9 (--inner-lr)
    inner_wd: float = 5e-5  # --inner-wd
    max_grad_norm: float = 50.0  # clients' and server's gradients clipped to 50 in the code
    clients_per_step: int = 1  # the code's --clients-per-step 5 assumes its 5000 steps (docstring)

    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True
    counts_traffic: ClassVar[bool] = True

    def __post_init__(self):
        if min(self.hidden, self.clients_per_step) < 1 or self.n_hidden < 0 or (self.embed_dim or 1) < 1:
            raise FedcondError("PeFLL needs hidden, clients_per_step, embed_dim >= 1 and n_hidden >= 0")

    def dim(self, ctx: Context) -> int:
        return self.embed_dim or int(1 + ctx.federation.num_clients / 4)

    def nets(self, ctx: Context):
        """Builders of (E, h)."""
        fed = ctx.federation
        shapes = H.target_shapes(ctx.spec(False))
        return (
            lambda: EmbedNet(fed.input_shape, fed.num_classes, self.dim(ctx), fed.mean, fed.std),
            lambda: H.HyperNet(self.dim(ctx), self.hidden, self.n_hidden, shapes),
        )

    def plain_jobs(self) -> bool:
        return True  # the networks' steps are the server's; a client runs plain SGD

    def init(self, ctx: Context) -> State:
        build_e, build_h = self.nets(ctx)
        params = {
            **{f"embed.{k}": v for k, v in H.seeded_params(build_e, ctx.seed, PEFLL, 0).items()},
            **{f"hyper.{k}": v for k, v in H.seeded_params(build_h, ctx.seed, PEFLL, 1).items()},
        }
        c = ctx.federation.clients[0]
        with torch.no_grad():
            first = self.raw_descriptor(ctx, params, c.x_train, c.y_train)  # [E]
        scale = (
            first.mean(),
            first.std() if first.numel() > 1 else torch.tensor(1.0),
        )  # one coordinate: no spread to fix
        w0 = ctx.init_params(False)
        n = ctx.federation.num_clients
        return State(
            models=self.models(ctx, params, scale, [w0] * n),
            assignment=tuple(range(n)),
            extra={"params": params, "scale": scale, "adam": None},
        )

    def raw_descriptor(self, ctx: Context, params: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """(1/n) sum_j E(x_j, y_j; psi) [E], before the fixed rescaling."""
        net = H.skeleton(self.nets(ctx)[0])
        return H.call(net, _part(params, "embed."), x, y).mean(dim=0)

    def descriptor(self, ctx: Context, params: Params, scale, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        m, s = scale
        return (self.raw_descriptor(ctx, params, x, y) - m) / s  # [E]

    def generate(self, ctx: Context, params: Params, scale, x: torch.Tensor, y: torch.Tensor) -> dict:
        """theta = h(v; phi) with v the descriptor of (x, y): the model a client of that data gets."""
        net = H.skeleton(self.nets(ctx)[1])
        return H.call(net, _part(params, "hyper."), self.descriptor(ctx, params, scale, x, y))

    def models(self, ctx: Context, params: Params, scale, held: list[Params]) -> tuple[Params, ...]:
        """Every client's model h(v_i; phi), v_i the descriptor of its training data, with the buffers it holds."""
        with torch.no_grad():
            v = torch.stack([self.descriptor(ctx, params, scale, c.x_train, c.y_train) for c in ctx.federation.clients])
        return H.generated(H.skeleton(self.nets(ctx)[1]), _part(params, "hyper."), v, held)

    def round(self, ctx: Context, state: State, r: int) -> State:
        # the round's own copy of (psi, phi) and Adam's moments, which the steps update in place
        params, scale, adam = H.owned(state.extra["params"]), state.extra["scale"], H.owned(state.extra["adam"])
        sgd = H.inner_sgd(ctx, self.inner_lr, self.inner_wd, self.max_grad_norm)
        clients, hyper_net = ctx.federation.clients, H.skeleton(self.nets(ctx)[1])
        held, done = list(state.models), {}
        for group in H.steps_of_round(ctx, r, PEFLL, self.clients_per_step):
            leaves = {k: v.detach().requires_grad_() for k, v in params.items()}
            v = torch.stack(
                [self.descriptor(ctx, leaves, scale, clients[i].x_train, clients[i].y_train) for i in group]
            )
            batch = H.call(hyper_net, _part(leaves, "hyper."), v)  # the group's models at once: [G, ...]
            self._count_embedding(ctx, group, params)
            grads, results = H.round_trip(ctx, group, batch, held, leaves, sgd, r)
            if grads is None:
                continue
            params, adam = H.adam_step(params, H.clip(grads, self.max_grad_norm), adam, self.lr)
            for i, res in results.items():
                held[i] = res.params
            done.update(results)
        return State(
            models=self.models(ctx, params, scale, held),
            assignment=state.assignment,
            round=r + 1,
            train_loss=H.mean_loss(done, ctx.federation.sizes()),
            extra={"params": params, "scale": scale, "adam": adam},
        )

    def _count_embedding(self, ctx: Context, group: tuple[int, ...], params: Params) -> None:
        """PeFLL's exchange besides the generated weights (round_trip counts those): the embedding
        network goes to each client, which sends its descriptor v; after the client's training the
        server sends dL/dv back and the client returns the embedding network's gradient. The client
        runs its data through the embedding network forward and backward."""
        if ctx.traffic is None:
            return
        psi, v = _part(params, "embed."), torch.zeros(self.dim(ctx))
        for i in group:
            ctx.traffic.send(i, (psi, v))
            ctx.traffic.receive(i, (v, psi))
            ctx.traffic.train(i, ctx.federation.clients[i].n_train)

    def serve_newcomer(self, ctx: Context, state: State, client, client_id: int) -> Params:
        """One forward pass: the descriptor of the newcomer's training data through the hypernetwork."""
        shapes = H.target_shapes(ctx.spec(False))
        held = [H.buffers(w, shapes) for w in state.models]
        bufs = weighted_average(held, ctx.federation.sizes()) if held[0] else {}
        with torch.no_grad():
            return {
                **bufs,
                **self.generate(ctx, state.extra["params"], state.extra["scale"], client.x_train, client.y_train),
            }


def _part(params: Params, prefix: str) -> Params:
    return {k[len(prefix) :]: v for k, v in params.items() if k.startswith(prefix)}
