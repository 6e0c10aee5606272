"""pFedHN (Shamsian, Navon, Fetaya and Chechik, "Personalized Federated Learning using
Hypernetworks", ICML 2021), Algorithm 1.

The server holds a hypernetwork h(.; phi) and one learned embedding v_i per client; client i's
model is theta_i = h(v_i; phi), every trainable tensor of the target CNN. A server step:
  1. send theta_i = h(v_i; phi) to client i;
  2. the client runs local SGD from theta_i on its own data -> theta~_i, and sends
     delta theta_i = theta_i - theta~_i;
  3. the server updates phi and v_i with the gradient
       grad_phi = (d theta_i / d phi)^T delta theta_i,   grad_{v_i} = (d theta_i / d v_i)^T delta theta_i
     (clipped to norm `max_grad_norm`, then SGD with momentum 0.9 and weight decay, as the public code).
A round takes every client once, in a seeded random order, `clients_per_step` clients per server
step (1, as the paper's code; with more, their gradients are averaged). Client i predicts with
h(v_i; phi) of the final phi.

Newcomers (the paper's generalisation to novel clients): phi is frozen and only a new embedding v
(drawn like the training clients', N(0, 1)) is fitted, by the same step with phi fixed:
`newcomer_steps` steps (None: the run's number of rounds, as many steps as each training client took).

The hypernetwork (hypernet.HyperNet) generates all layers of the target CNN, as the public code
does for its LeNet-like CNN: an MLP of hidden size 100 with 3 hidden layers and one linear output
per target tensor; embedding dimension int(1 + N/4). The server's work (generation, the
vector-Jacobian product, the optimiser) runs in this process; the local training goes through the
engine. A target model's buffers (batch-norm statistics) are not generated: they stay with the client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn as nn

from ..engine import Job, Params
from ..errors import FedcondError
from .base import Algorithm, Context, State
from . import hypernet as H

PFEDHN = 0x9FED  # names pFedHN's random streams: the hypernetwork's initialisation, the client order
NEWCOMER = 0x9FEE  # names a newcomer's embedding draw and batch orders


@dataclass(frozen=True)
class PFedHN(Algorithm):
    embed_dim: int | None = None  # None: int(1 + N/4), the code's "auto embedding size"
    hidden: int = 100  # --hyper-hid
    n_hidden: int = 3  # --n-hidden
    lr: float = 1e-2  # server SGD (phi and the embeddings; --embed-lr defaults to --lr)
    weight_decay: float = 1e-3  # --wd
    inner_lr: float = 5e-3  # the clients' SGD, momentum 0.9 (--inner-lr)
    inner_wd: float = 5e-5  # --inner-wd
    max_grad_norm: float = 50.0  # both the clients' and the server's gradients are clipped to 50 in the code
    clients_per_step: int = 1  # the code samples one client per server step
    newcomer_steps: int | None = None  # None: the run's number of rounds

    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True
    counts_traffic: ClassVar[bool] = True

    def __post_init__(self):
        if min(self.hidden, self.clients_per_step) < 1 or self.n_hidden < 0 or (self.embed_dim or 1) < 1:
            raise FedcondError("pFedHN needs hidden, clients_per_step, embed_dim >= 1 and n_hidden >= 0")
        if self.newcomer_steps is not None and self.newcomer_steps < 0:
            raise FedcondError(f"pFedHN's newcomer_steps must be None or >= 0, got {self.newcomer_steps}")

    def dim(self, ctx: Context) -> int:
        return self.embed_dim or int(1 + ctx.federation.num_clients / 4)

    def builder(self, ctx: Context):
        shapes = H.target_shapes(ctx.spec(False))
        return lambda: H.HyperNet(self.dim(ctx), self.hidden, self.n_hidden, shapes)

    def plain_jobs(self) -> bool:
        return True  # the hypernetwork's step is the server's; a client runs plain SGD

    def init(self, ctx: Context) -> State:
        n = ctx.federation.num_clients
        phi = H.seeded_params(self.builder(ctx), ctx.seed, PFEDHN)
        phi["embeddings"] = H.seeded_params(lambda: nn.Embedding(n, self.dim(ctx)), ctx.seed, PFEDHN, 1)[
            "weight"
        ]  # [N, E]
        w0 = ctx.init_params(False)
        return State(
            models=self.models(ctx, phi, [w0] * n), assignment=tuple(range(n)), extra={"phi": phi, "momentum": None}
        )

    def models(self, ctx: Context, phi: Params, held: list[Params]) -> tuple[Params, ...]:
        """Every client's model h(v_i; phi), with the buffers it holds."""
        return H.generated(H.skeleton(self.builder(ctx)), _hyper(phi), phi["embeddings"], held)

    def round(self, ctx: Context, state: State, r: int) -> State:
        # the round's own copy of phi and the momentum, which the steps update in place
        phi, momentum = H.owned(state.extra["phi"]), H.owned(state.extra["momentum"])
        net, sgd = H.skeleton(self.builder(ctx)), H.inner_sgd(ctx, self.inner_lr, self.inner_wd, self.max_grad_norm)
        held, done = list(state.models), {}
        for group in H.steps_of_round(ctx, r, PFEDHN, self.clients_per_step):
            leaves = {k: v.detach().requires_grad_() for k, v in phi.items()}
            batch = H.call(net, _hyper(leaves), leaves["embeddings"][list(group)])  # [G, ...]
            grads, results = H.round_trip(ctx, group, batch, held, leaves, sgd, r)
            if grads is None:
                continue
            phi, momentum = H.sgd_step(
                phi, H.clip(grads, self.max_grad_norm), momentum, self.lr, 0.9, self.weight_decay
            )
            for i, res in results.items():
                held[i] = res.params
            done.update(results)
        return State(
            models=self.models(ctx, phi, held),
            assignment=state.assignment,
            round=r + 1,
            train_loss=H.mean_loss(done, ctx.federation.sizes()),
            extra={"phi": phi, "momentum": momentum},
        )

    def serve_newcomer(self, ctx: Context, state: State, client, client_id: int) -> Params:
        """phi frozen; a new embedding fitted by `newcomer_steps` of pFedHN's step on the newcomer's data."""
        phi = state.extra["phi"]
        net, hyper = H.skeleton(self.builder(ctx)), _hyper(phi)
        sgd = H.inner_sgd(ctx, self.inner_lr, self.inner_wd, self.max_grad_norm)
        v = H.seeded_params(lambda: nn.Embedding(1, self.dim(ctx)), ctx.seed, NEWCOMER, client_id)["weight"][0]  # [E]
        # v is this function's own tensor: the steps update it in place
        held, buf = H.buffers(ctx.init_params(False), H.target_shapes(ctx.spec(False))), None
        for t in range(ctx.rounds if self.newcomer_steps is None else self.newcomer_steps):
            leaf = {"v": v.detach().requires_grad_()}
            theta = H.call(net, hyper, leaf["v"])
            job = Job(
                params={**held, **{k: x.detach() for k, x in theta.items()}},
                x=client.x_train,
                y=client.y_train,
                s=None,
                epochs=ctx.local_epochs,
                seed=(ctx.seed, NEWCOMER, client_id, t),
                sgd=sgd,
            )
            res = ctx.engine.train(ctx.spec(False), [job])[0]
            held = H.buffers(res.params, theta)
            grads = H.vjp([theta], [{k: x.detach() - res.params[k] for k, x in theta.items()}], leaf)
            new, buf = H.sgd_step({"v": v}, H.clip(grads, self.max_grad_norm), buf, self.lr, 0.9, self.weight_decay)
            v = new["v"]
        with torch.no_grad():
            return {**held, **H.call(net, hyper, v)}


def _hyper(phi: Params) -> Params:
    """The hypernetwork's own parameters (without the embedding table)."""
    return {k: v for k, v in phi.items() if k != "embeddings"}
