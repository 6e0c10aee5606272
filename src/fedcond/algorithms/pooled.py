"""Training on pooled data of groups of clients: the paper's Local, Oracle and Conditional.

Each group has one model, trained one epoch per round on the concatenated data of its members;
momentum carries across rounds, so R rounds are exactly R epochs of ordinary training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .base import Algorithm, Context, State


@dataclass(frozen=True)
class PooledTraining(Algorithm):
    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = False  # one epoch of ordinary training per round
    counts_traffic: ClassVar[bool] = True  # Context.job counts: a client's own job, or the data a pooled one needs

    def groups(self, ctx: Context) -> tuple[tuple[int, ...], ...]:
        raise NotImplementedError

    def init(self, ctx: Context) -> State:
        groups = self.groups(ctx)
        assignment = [0] * ctx.federation.num_clients
        for g, members in enumerate(groups):
            for i in members:
                assignment[i] = g
        models = tuple(ctx.init_params(self.conditioned, g) for g in range(len(groups)))
        return State(
            models=models, assignment=tuple(assignment), momentum=(None,) * len(groups), extra={"groups": groups}
        )

    def round(self, ctx: Context, state: State, r: int) -> State:
        groups = state.extra["groups"]
        jobs = [
            ctx.job(
                state.models[g], members, self.conditioned, seed=(r, g), momentum=state.momentum[g], keep_momentum=True
            )
            for g, members in enumerate(groups)
        ]
        results = ctx.engine.train(ctx.spec(self.conditioned), jobs)
        loss = float(np.average([res.mean_loss for res in results], weights=[len(j.y) for j in jobs]))
        return State(
            models=tuple(res.params for res in results),
            assignment=state.assignment,
            momentum=tuple(res.momentum for res in results),
            round=r + 1,
            train_loss=loss,
            extra=state.extra,
        )


@dataclass(frozen=True)
class Local(PooledTraining):
    """One model per client, trained only on that client's data."""

    def groups(self, ctx):
        return tuple((i,) for i in range(ctx.federation.num_clients))


@dataclass(frozen=True)
class Oracle(PooledTraining):
    """One model per true cluster, trained on the cluster's pooled data: the ceiling for clustered methods."""

    needs_truth: ClassVar[bool] = True

    def groups(self, ctx):
        cluster = ctx.truth.cluster
        return tuple(tuple(int(i) for i in np.flatnonzero(cluster == k)) for k in range(ctx.truth.num_clusters))


@dataclass(frozen=True)
class Conditional(PooledTraining):
    """Client-conditional FL, the paper's protocol: one model on every client's (x, s_i, y), pooled.

    The statistics s_i enter the model; pooling isolates the effect of conditioning. For the
    deployable version with FedAvg rounds see `ConditionalFedAvg`.
    """

    conditioned: ClassVar[bool] = True

    def groups(self, ctx):
        return (tuple(range(ctx.federation.num_clients)),)
