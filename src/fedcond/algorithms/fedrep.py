"""FedRep (Collins, Hassani, Mokhtari and Shakkottai, "Exploiting Shared Representations for
Personalized Federated Learning", ICML 2021), Algorithm 1.

The model is a representation phi (every layer but the head: the body) and a head h (the last
linear layer, `model.head`). The server holds one body phi_r; client i keeps its own head h_i
(h_i = the initial head at the start). Round r, every client i:
  1. head update: from (phi_r, h_i), `head_epochs` (tau_h) epochs of SGD on f_i with the body frozen
     -> h_i';
  2. body update: from (phi_r, h_i'), `body_epochs` (tau_b) epochs of SGD on f_i with the head frozen
     -> phi_i;
  3. the server averages bodies only: phi_{r+1} = sum_i n_i phi_i / sum_i n_i; h_i' stays at the client.
Client i predicts with (phi_{r+1}, h_i') (FedRep's code evaluates the global body with the local head).
A newcomer trains a head on the final global body: from (phi_R, the initial head), `head_epochs` epochs
with the body frozen, on its own training data.

Freezing is done in the loss (HeadOnlyLoss, BodyOnlyLoss: the frozen part's output or weights are
detached), so a frozen tensor gets no gradient and SGD leaves it (and its momentum) untouched; the
jobs go through the engine like every other algorithm's. The body's buffers (batch-norm statistics)
are averaged with it. A head update's body is frozen for the whole job, so where its features depend on
the sample alone (no batch norm) the engine computes them once per job, not once per step: the same
numbers bit for bit (checked per job), FedRep rounds 2.9x faster on the MNIST CNN (benchmarks/fedrep_head.py;
engine/local_sgd.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, ClassVar

import torch
import torch.nn.functional as F

from ..engine import Job, Params, weighted_average
from ..errors import FedcondError
from .base import Algorithm, Context, State, aggregate, receive, send

HEAD = 0x4EAD  # names the head updates' batch-order streams (the body update uses FedAvg's)


@functools.lru_cache(maxsize=None)
def head_names(spec) -> frozenset[str]:
    """state_dict keys of the model's head (`model.head`, the classifier on top of `features`)."""
    with torch.random.fork_rng(devices=[]):  # building draws initial weights; keep the caller's stream untouched
        model = spec.build()
    prefix = next(name for name, m in model.named_modules() if m is model.head)
    return frozenset(f"{prefix}.{k}" for k in model.head.state_dict())


def _task_loss(classification, logits, y, x):
    return F.cross_entropy(logits, y) if classification is None else classification(logits, y, x)


@dataclass(frozen=True)
class HeadOnlyLoss:
    """Cross-entropy through the head alone: the body's features are computed without gradient."""

    classification: Callable | None = None  # JDFL's supervision, if any (Context.classification_loss)
    # the body is frozen for the whole job, so the engine may compute its features once per job
    # (engine/local_sgd.py, frozen_features) and call head_loss on them
    frozen_features: ClassVar[bool] = True

    def __call__(self, model, x, s, y):
        with torch.no_grad():
            z = model.features(x, s)  # [B, D]
        return self.head_loss(model, z, x, y)

    def head_loss(self, model, z, x, y):
        return _task_loss(self.classification, model.head(z), y, x)


@dataclass(frozen=True)
class BodyOnlyLoss:
    """Cross-entropy through the body alone: the head's weights enter as constants."""

    classification: Callable | None = None

    def __call__(self, model, x, s, y):
        head = model.head
        logits = F.linear(model.features(x, s), head.weight.detach(), head.bias.detach())  # [B, K]
        return _task_loss(self.classification, logits, y, x)


@dataclass(frozen=True)
class FedRep(Algorithm):
    head_epochs: int = 10  # tau_h: FedRep's CIFAR-10 scripts, local_ep 11 with local_rep_ep 1 (docs/choices.md)
    body_epochs: int | None = None  # tau_b; None: the protocol's local_epochs (1 under the paper protocol, FedRep's 1)

    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True
    counts_traffic: ClassVar[bool] = True

    def __post_init__(self):
        if self.head_epochs < 0 or (self.body_epochs is not None and self.body_epochs < 1):
            raise FedcondError(
                f"FedRep needs head_epochs >= 0 and body_epochs >= 1, got {self.head_epochs}, {self.body_epochs}"
            )

    def init(self, ctx: Context) -> State:
        n = ctx.federation.num_clients
        w0 = ctx.init_params(self.conditioned)
        return State(models=(w0,) * n, assignment=tuple(range(n)))  # models[i]: the global body with client i's head

    def head_job(self, ctx: Context, params: Params, i: int, seed: tuple[int, ...]) -> Job:
        return ctx.job(
            params,
            (i,),
            self.conditioned,
            seed=seed,
            epochs=self.head_epochs,
            loss_fn=HeadOnlyLoss(ctx.classification_loss((i,), seed)),
        )

    def round(self, ctx: Context, state: State, r: int) -> State:
        n, spec = ctx.federation.num_clients, ctx.spec(self.conditioned)
        start = list(state.models)
        head = head_names(spec)
        shared = [k for k in state.models[0] if k not in head]  # the body travels; each head stays on its client
        send(ctx, range(n), lambda i: {k: state.models[i][k] for k in shared})
        if self.head_epochs > 0:
            heads = ctx.engine.train(spec, [self.head_job(ctx, start[i], i, (r, i, HEAD)) for i in range(n)])
            start = [m if res is None else res.params for m, res in zip(start, heads)]  # None: dropped out (Flower)
        epochs = self.body_epochs or ctx.local_epochs
        bodies = ctx.engine.train(
            spec,
            [
                ctx.job(
                    start[i],
                    (i,),
                    self.conditioned,
                    seed=(r, i),
                    epochs=epochs,
                    loss_fn=BodyOnlyLoss(ctx.classification_loss((i,), (r, i))),
                )
                for i in range(n)
            ],
        )
        receive(ctx, range(n), bodies, keep=shared)
        replies = aggregate(ctx, tuple(range(n)), bodies)
        body = weighted_average(
            [{k: v for k, v in res.params.items() if k not in head} for res in replies.results], replies.sizes
        )
        # one body tensor shared by every client's model (never written in place): memory for the heads only
        models = tuple(
            {**body, **{k: start[i][k] if bodies[i] is None else bodies[i].params[k] for k in head}} for i in range(n)
        )
        return State(models=models, assignment=state.assignment, round=r + 1, train_loss=replies.loss)

    def serve_newcomer(self, ctx: Context, state: State, client, client_id: int) -> Params:
        """A head trained on the final global body (frozen), from the initial head, on the newcomer's data."""
        spec, head = ctx.spec(self.conditioned), head_names(ctx.spec(self.conditioned))
        w0 = ctx.init_params(self.conditioned)
        params = {k: (w0[k] if k in head else v) for k, v in state.models[0].items()}
        if self.head_epochs == 0:
            return params
        job = Job(
            params=params,
            x=client.x_train,
            y=client.y_train,
            s=None,
            epochs=self.head_epochs,
            seed=(ctx.seed, HEAD, client_id),
            loss_fn=HeadOnlyLoss(),
        )
        return ctx.engine.train(spec, [job])[0].params
