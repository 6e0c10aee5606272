"""SCAFFOLD (Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated
Learning", ICML 2020), Algorithm 1 with option II control variates.

State: global weights x, server control variate c, one control variate c_i per client (all zero
at the start). Round r, for each participating client i (the set S):

    y_i <- x;  K local steps  y_i <- y_i - lr (g_i(y_i) - c_i + c)      (a linear term <y, c - c_i>)
    c_i+ = c_i - c + (x - y_i) / (lr * S(K, beta))                       (option II)

and the server sets

    x <- x + eta_g * sum_{i in S} p_i^S (y_i - x),      p_i^S = n_i / sum_{j in S} n_j
    c <- c + sum_{i in S} p_i (c_i+ - c_i),              p_i  = n_i / sum_{j=1..N} n_j

K is the job's actual number of steps (JobResult.steps) and eta_g = `server_lr`. Only parameters
carry control variates; buffers (batch-norm statistics) are averaged as in FedAvg.

Two choices, both equal to the paper's equations in its setting (equal client sizes, plain SGD):

- Weights. The paper averages uniformly (1/|S| for x, 1/N for c). We weight by client size, as
  our FedAvg does, so SCAFFOLD optimises the same objective sum_i (n_i/n) L_i and a round with zero
  control variates is exactly FedAvg's. c still sums over all N clients: a non-participant
  contributes c_i+ - c_i = 0, so with partial participation c moves by |S|/N of the mean, as in
  the paper.

- Momentum. The correction c - c_i is added to each minibatch gradient before the optimiser step,
  so it goes through the momentum buffer like the gradient it corrects. The paper's option II
  divides the displacement by K lr, the total step multiplier of plain SGD. Heavy-ball SGD with
  momentum beta, starting from an empty buffer (clients keep no optimiser state), moves a constant
  gradient g by lr S(K, beta) g with S(K, beta) = sum_{j=1..K} (1 - beta^j) / (1 - beta) (= K at
  beta = 0). We divide by lr S(K, beta), so c_i+ is again the average corrected gradient; keeping
  K lr under momentum 0.9 would inflate c_i by up to 1/(1 - beta) = 10x, and the control variates
  grow without bound once S/K > 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..engine import Params, Regulariser
from ..errors import FedcondError
from .base import aggregate, check_participation, parameter_names, participants, Algorithm, Context, State


def effective_steps(k: int, momentum: float) -> float:
    """S(K, beta) = sum_{j=1..K} (1 - beta^j) / (1 - beta): how far K heavy-ball steps from an empty
    momentum buffer move a constant gradient, in units of lr * gradient (K when beta = 0)."""
    if momentum == 0.0:
        return float(k)
    return float(sum((1.0 - momentum**j) / (1.0 - momentum) for j in range(1, k + 1)))


def zeros_like_params(params: Params, names: tuple[str, ...]) -> Params:
    return {k: torch.zeros_like(params[k]) for k in names}


@dataclass(frozen=True)
class Scaffold(Algorithm):
    server_lr: float = 1.0  # eta_g, the global step size
    participation: float = 1.0  # fraction of clients that train each round

    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True

    def __post_init__(self):
        if self.server_lr <= 0:
            raise FedcondError(f"SCAFFOLD server_lr must be positive, got {self.server_lr}")
        check_participation(self.participation)

    def init(self, ctx: Context) -> State:
        x = ctx.init_params(self.conditioned)
        names = parameter_names(ctx.spec(self.conditioned))
        n = ctx.federation.num_clients
        zero = zeros_like_params(x, names)
        return State(models=(x,), assignment=(0,) * n, extra={"c": zero, "c_clients": (zero,) * n})

    def round(self, ctx: Context, state: State, r: int) -> State:
        x = state.models[0]
        c, c_clients = state.extra["c"], state.extra["c_clients"]
        names = tuple(c)
        active = participants(ctx, r, self.participation)
        jobs = [
            ctx.job(
                x,
                (i,),
                self.conditioned,
                seed=(r, i),
                regulariser=Regulariser(linear={k: c[k] - c_clients[i][k] for k in names}),
            )  # g - c_i + c
            for i in active
        ]
        replies = aggregate(ctx, active, ctx.engine.train(ctx.spec(self.conditioned), jobs))
        active, results = replies.clients, replies.results

        lr, beta = ctx.sgd.lr, ctx.sgd.momentum
        sizes = ctx.federation.sizes()
        p = sizes / sizes.sum()  # weights over all N clients, for c
        new_clients = list(c_clients)
        for i, res in zip(active, results):
            scale = 1.0 / (lr * effective_steps(res.steps, beta))
            new_clients[i] = {k: c_clients[i][k] - c[k] + (x[k] - res.params[k]) * scale for k in names}  # option II
        new_c = {k: c[k] + sum(float(p[i]) * (new_clients[i][k] - c_clients[i][k]) for i in active) for k in names}

        avg = replies.average()  # x + mean(y_i - x) at eta_g = 1
        if self.server_lr == 1.0:
            new_x = avg
        else:
            new_x = {k: x[k] + self.server_lr * (avg[k] - x[k]) if k in c else avg[k] for k in avg}
        return State(
            models=(new_x,),
            assignment=state.assignment,
            round=r + 1,
            train_loss=replies.loss,
            extra={"c": new_c, "c_clients": tuple(new_clients)},
        )
