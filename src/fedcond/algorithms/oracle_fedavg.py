"""Oracle-FedAvg: FedAvg run within each true cluster, one model per cluster, trained federated.

Oracle pools each cluster's data in one place; Oracle-FedAvg keeps the data on the clients and runs
FedAvg's rounds inside each cluster. Round r: client i (of true cluster k_i) trains `local_epochs` of
SGD from its cluster's model w_{k_i, r}; the server averages each cluster's replies (weighted by n_i)
and steps each cluster model with the FedAvg family's server optimiser (server_opt.py; one optimiser
state per cluster). Client i predicts with w_{k_i}; a newcomer gets its cluster's model.

It knows the clusters, so it is a ceiling for federated clustered methods (IFCA, Conditional-FedAvg)
at the same rounds and local epochs: where a federated method's gap to Oracle is also Oracle-FedAvg's,
the gap is the cost of training federated within the budget, not of finding or conditioning on the
clusters. Run it with the settings of the method it bounds, e.g.
`Oracle-FedAvg(server_opt=momentum,server_momentum=0.5,local_epochs=5,min_local_steps=18)` for
Conditional-FedAvg (`min_local_steps` since stop 69; it changes the steps of clients with fewer than 1,152 samples).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..engine import JobResult
from ..errors import FedcondError
from .base import Context, State, aggregate, receive, send
from .fedavg import FedAvg


@dataclass(frozen=True)
class OracleFedAvg(FedAvg):
    needs_truth: ClassVar[bool] = True

    def __post_init__(self):
        super().__post_init__()  # FedAvg's checks, local_epochs's among them
        if self.carry_momentum:
            raise FedcondError("Oracle-FedAvg does not carry client momentum across rounds (carry_momentum=False)")

    def plain_jobs(self) -> bool:
        return True

    def init(self, ctx: Context) -> State:
        truth = ctx.truth
        if truth is None:  # the simulator refuses an oracle on a federation without clusters before this
            raise FedcondError("Oracle-FedAvg needs the true clusters")
        models = tuple(ctx.init_params(False, g) for g in range(truth.num_clusters))  # a draw per cluster, as Oracle's
        return State(models=models, assignment=tuple(int(c) for c in truth.cluster))

    def round(self, ctx: Context, state: State, r: int) -> State:
        n, home = ctx.federation.num_clients, state.assignment
        epochs = self.epochs_per_round(ctx)
        jobs = [
            ctx.job(state.models[home[i]], (i,), False, seed=(r, i), epochs=epochs, sgd=self.local_sgd(ctx, i))
            for i in range(n)
        ]
        send(ctx, range(n), lambda i: state.models[home[i]])
        results: list[JobResult | None] = list(ctx.engine.train(ctx.spec(False), jobs))  # None: dropped out (Flower)
        receive(ctx, range(n), results)
        models = list(state.models)
        slots = list(state.extra.get("server") or [None] * len(models))
        for k in range(len(models)):
            members = [int(i) for i in np.flatnonzero(np.asarray(home) == k)]
            replies = aggregate(ctx, members, [results[i] for i in members])  # without clients that dropped out
            if replies.clients:
                models[k], slots[k] = self.server_step(models[k], replies.average(), slots[k])
        return State(
            models=tuple(models),
            assignment=home,
            round=r + 1,
            train_loss=aggregate(ctx, range(n), results).loss,
            extra={} if all(s is None for s in slots) else {"server": slots},
        )
