"""FedProx (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020).

Round r: every participating client starts from the global weights w_r and runs `local_epochs`
of SGD on its proximal objective

    h_i(theta) = L_i(theta) + mu/2 ||theta - w_r||^2,

and the server sets w_{r+1} = sum_i n_i theta_i / sum_i n_i over the participants (as our FedAvg).
The proximal gradient mu (theta - w_r) is added to each minibatch gradient before the optimiser
step, so with SGD momentum it enters the momentum buffer like any gradient: momentum optimises
h_i, it does not change it. Only parameters get the term, never buffers. With mu = 0 a round is
FedAvg's, bit for bit.

Also home to the two helpers the other drift-correcting optimisers share: the seeded client
sample (`participants`) and the names of a model's trainable parameters (`parameter_names`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..engine import Regulariser
from ..errors import FedcondError
from .base import Algorithm, Context, State, aggregate, check_participation, participants
from .server_opt import ServerOptimiser


@dataclass(frozen=True)
class FedProx(ServerOptimiser, Algorithm):
    mu: float = 0.01  # proximal weight; 0 gives FedAvg
    participation: float = 1.0  # fraction of clients that train each round

    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True

    def __post_init__(self):
        super().__post_init__()
        if self.mu < 0:
            raise FedcondError(f"FedProx mu must be >= 0, got {self.mu}")
        check_participation(self.participation)

    def init(self, ctx: Context) -> State:
        return State(models=(ctx.init_params(self.conditioned),), assignment=(0,) * ctx.federation.num_clients)

    def round(self, ctx: Context, state: State, r: int) -> State:
        w = state.models[0]
        active = participants(ctx, r, self.participation)
        prox = Regulariser(mu=self.mu, anchor=w)  # the same anchor for everyone: the broadcast weights
        jobs = [ctx.job(w, (i,), self.conditioned, seed=(r, i), regulariser=prox) for i in active]
        replies = aggregate(ctx, active, ctx.engine.train(ctx.spec(self.conditioned), jobs))
        w, slots = self.server_step(w, replies.average(), state.extra.get("server"))
        extra = {} if slots is None else {"server": slots}
        return State(models=(w,), assignment=state.assignment, round=r + 1, train_loss=replies.loss, extra=extra)
