"""FedAvg (McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized
Data", AISTATS 2017) and its conditioned twin.

Round r: every client starts from the global weights w_r, runs `local_epochs` of SGD on its own
data (fresh momentum: clients keep no optimiser state), and the server sets
w_{r+1} = sum_i n_i w_i / sum_i n_i.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..engine import weighted_average
from .base import Context, State


@dataclass(frozen=True)
class FedAvg:
    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True

    def init(self, ctx: Context) -> State:
        return State(models=(ctx.init_params(self.conditioned),), assignment=(0,) * ctx.federation.num_clients)

    def round(self, ctx: Context, state: State, r: int) -> State:
        n = ctx.federation.num_clients
        jobs = [ctx.job(state.models[0], (i,), self.conditioned, seed=(r, i)) for i in range(n)]
        results = ctx.engine.train(ctx.spec(self.conditioned), jobs)
        sizes = ctx.federation.sizes()
        new = weighted_average([res.params for res in results], sizes)
        loss = float(np.average([res.mean_loss for res in results], weights=sizes))
        return State(models=(new,), assignment=state.assignment, round=r + 1, train_loss=loss)


@dataclass(frozen=True)
class ConditionalFedAvg(FedAvg):
    """Client-conditional FL deployed with FedAvg rounds: each client trains with its own fixed s_i
    as an input; only the shared weights travel (the statistics never leave the client)."""

    conditioned: ClassVar[bool] = True
