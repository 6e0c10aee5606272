"""Gossip learning: decentralised averaging with one random peer (the paper's Gossip baseline; cf.
Boyd et al., "Randomized Gossip Algorithms", IEEE Trans. Inf. Theory 2006, and Hegedus et al.,
"Gossip learning as a decentralized alternative to federated learning", DAIS 2019).

Every client i keeps its own model theta_i, drawn from its own seeded initialisation (the default,
`independent_init=True`), or all from one shared initialisation (`independent_init=False`). The
paper says only "random pairwise model averaging on a random topology"; the default was settled by
a probe at the paper protocol (docs/choices.md): on E1 MNIST K=2 independent initialisations give
.972 (rich; published .982) and .159 (super sparse; published .151, the collapse to chance), a
shared one .983 and .837: only the independent reading serves both cells.
`weight_init` names how those weights are drawn, a reading probed for the paper's collapse (issue 40):
"torch" (the default: PyTorch's layer defaults, Kaiming-uniform weights with a = sqrt(5), i.e.
U(+-1/sqrt(fan_in)), and biases U(+-1/sqrt(fan_in))) or "glorot" (Keras's defaults: Glorot-uniform
weights, U(+-sqrt(6 / (fan_in + fan_out))) with fan = channels x kernel area, and zero biases;
batch norm keeps its ones and zeros). Averaging n independent draws shrinks a weight's spread by
sqrt(n), and the scale and the zero biases decide how near that shrinkage leaves a dead network.
Round r:
  1. local update: theta_i' = `local_epochs` of SGD on client i's data from theta_i (fresh
     momentum, as in FedAvg: nothing but the weights is carried across rounds; with
     `carry_momentum=True` each client keeps its own SGD momentum buffer from round to round, a
     reading probed for the paper's collapse, issue 40: averaging leaves the buffer alone);
  2. random pairing: a uniformly random perfect matching of the clients, drawn from the stream
     (seed, PAIRING, r); each pair {i, j} sets theta_i = theta_j = (theta_i' + theta_j') / 2.
     With an odd number of clients the one left out keeps theta_i'. No adaptive weights.
     `pairing=sequential` reads "random pairwise averaging on a random topology" as classic
     asynchronous gossip instead: every client, in a random order, contacts one uniformly random
     other client and both take their average, one pair after another, so a client is in about
     two averages a round and models mix faster (probed for the collapse, issue 40; docs/choices.md).
Client i predicts with theta_i.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..engine import weighted_average
from ..errors import FedcondError
from .weight_init import check_weight_init, draw_weights
from .base import Algorithm, Context, State, aggregate, carried_momentum

PAIRING = 0x6055  # purpose of the random stream that draws each round's pairs


def random_pairs(num_clients: int, rng: np.random.Generator) -> tuple[tuple[int, int], ...]:
    """A uniformly random perfect matching of range(num_clients); with an odd count one client is left out."""
    perm = rng.permutation(num_clients)
    return tuple((int(perm[k]), int(perm[k + 1])) for k in range(0, num_clients - 1, 2))


def sequential_pairs(num_clients: int, rng: np.random.Generator) -> tuple[tuple[int, int], ...]:
    """Every client, in a random order, contacts one uniformly random other client: num_clients pairs,
    averaged one after another (a client can be in several; it is in about two)."""
    order = rng.permutation(num_clients)
    peers = rng.integers(0, num_clients - 1, size=num_clients)
    return tuple((int(i), int(p if p < i else p + 1)) for i, p in zip(order, peers))


PAIRINGS = {
    "matching": random_pairs,
    "sequential": sequential_pairs,
}  # Gossip's `pairing`: how it draws a round's pairs


@dataclass(frozen=True)
class Gossip(Algorithm):
    independent_init: bool = True  # every client starts from its own random weights; False: one shared draw
    carry_momentum: bool = False  # each client's SGD momentum lives across rounds (False: reset, as FedAvg's)
    weight_init: str = "torch"  # how each client's weights are drawn: torch (layer defaults) or glorot (Keras's)
    pairing: str = "matching"  # a key of PAIRINGS: one random perfect matching a round, or sequential calls

    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True

    def __post_init__(self):
        check_weight_init("Gossip", self.weight_init)
        if self.pairing not in PAIRINGS:
            raise FedcondError(f"Gossip pairing must be {' or '.join(PAIRINGS)}, got {self.pairing!r}")

    def plain_jobs(self) -> bool:
        return not self.carry_momentum

    def init(self, ctx: Context) -> State:
        n = ctx.federation.num_clients
        if self.independent_init:
            models = tuple(self._draw(ctx, i) for i in range(n))
        else:
            models = (self._draw(ctx, 0),) * n
        return State(models=models, assignment=tuple(range(n)), momentum=(None,) * n)

    def _draw(self, ctx: Context, i: int):
        return draw_weights(ctx.init_params(self.conditioned, i), self.weight_init, ctx.seed, i)

    def round(self, ctx: Context, state: State, r: int) -> State:
        n = ctx.federation.num_clients
        jobs = [
            ctx.job(
                state.models[i],
                (i,),
                self.conditioned,
                seed=(r, i),
                **({"momentum": state.momentum[i], "keep_momentum": True} if self.carry_momentum else {}),
            )
            for i in range(n)
        ]
        results = ctx.engine.train(ctx.spec(self.conditioned), jobs)
        # the odd one out keeps its locally trained model; a client that did not reply (over Flower it
        # dropped out) keeps the model and buffers it had, and its partner keeps its own trained model
        models = [state.models[i] if res is None else res.params for i, res in enumerate(results)]
        momentum = carried_momentum(state.momentum, results) if self.carry_momentum else (None,) * n
        pairs = PAIRINGS[self.pairing](n, np.random.default_rng(np.random.SeedSequence([ctx.seed, PAIRING, r])))
        for i, j in pairs:  # in order: under sequential pairing a model averaged earlier this round travels on
            if results[i] is not None and results[j] is not None:
                models[i] = models[j] = weighted_average([models[i], models[j]], np.ones(2))
        loss = aggregate(ctx, range(n), results).loss
        return State(
            models=tuple(models),
            assignment=state.assignment,
            momentum=momentum,
            round=r + 1,
            train_loss=loss,
            extra={"pairs": pairs},
        )
