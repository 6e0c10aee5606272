"""FedDC (Gao et al., "FedDC: Federated Learning with Non-IID Data via Local Drift Decoupling and
Correction", CVPR 2022), following the authors' code (github.com/gaoliang13/FedDC, `train_FedDC`
in utils_methods_FedDC.py and `train_model_FedDC` in utils_general.py).

State: server weights w, server gradient state G, and per client a local drift h_i and a
gradient state G_i (the code's `parameter_drifts[i]`, `state_gadient_diffs[-1]` and
`state_gadient_diffs[i]`; all zero at the start). With w_i = n_i / mean_j n_j, round r, for each
participating client i (the set P):

    alpha_i = alpha / w_i
    theta_i = argmin  L_i(theta) + alpha_i/2 ||theta + h_i - w||^2 + <theta, G / w_i - G_i>
              (approximately: `local_epochs` of SGD from w)
    h_i    <- h_i + (theta_i - w)                                          (drift decoupling)
    G_i+    = G_i - G / w_i - (theta_i - w) / (lr S(K, beta))              (gradient correction)

and the server sets

    G <- G + (1/N) sum_{i in P} w_i (G_i+ - G_i)
    w <- (1/|P|) sum_{i in P} theta_i + (1/N) sum_{i=1..N} h_i              (= mean(theta_i + h_i) with all clients)

The linear term is the paper's (1/(K lr)) <theta, Delta theta_i - Delta theta> written with the
code's states: G_i holds -Delta theta_i / (K lr) + the previous corrections, i.e. SCAFFOLD's option
II control variate c_i, and G / w_i its server twin c, scaled per client as in the code. K is the
job's actual number of steps (JobResult.steps; the code uses one nominal `n_minibatch` for every
client). The model broadcast and evaluated is w, the code's `cur_cld_model`.

Momentum: every term above is added to the minibatch gradient before the optimiser step, so it
goes through the momentum buffer. The drift h_i is a displacement and needs no correction, but
G_i+ converts a displacement into a gradient: like our SCAFFOLD we divide by lr S(K, beta),
S(K, beta) = sum_{j=1..K} (1 - beta^j) / (1 - beta), the step multiplier of heavy-ball SGD from an
empty buffer (= K at beta = 0, the code's K lr); see scaffold.py for why.

Other deviations from the code: no gradient clipping (the code clips at norm 10), no weight decay
and no learning-rate decay across rounds. Only parameters carry state; buffers (batch-norm
statistics) are averaged uniformly over P.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..engine import Regulariser
from ..errors import FedcondError
from .base import aggregate, check_participation, parameter_names, participants, Algorithm, Context, State
from .scaffold import effective_steps, zeros_like_params


@dataclass(frozen=True)
class FedDC(Algorithm):
    alpha: float = 0.01  # weight of the drift penalty (the code's alpha_coef)
    participation: float = 1.0  # fraction of clients that train each round

    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True

    def __post_init__(self):
        if self.alpha < 0:
            raise FedcondError(f"FedDC alpha must be >= 0, got {self.alpha}")
        check_participation(self.participation)

    def init(self, ctx: Context) -> State:
        w = ctx.init_params(self.conditioned)
        names = parameter_names(ctx.spec(self.conditioned))
        n = ctx.federation.num_clients
        zero = zeros_like_params(w, names)
        return State(
            models=(w,), assignment=(0,) * n, extra={"g": zero, "g_clients": (zero,) * n, "drift": (zero,) * n}
        )

    def round(self, ctx: Context, state: State, r: int) -> State:
        w = state.models[0]
        g, g_clients, drift = state.extra["g"], state.extra["g_clients"], state.extra["drift"]
        names = tuple(g)
        sizes = ctx.federation.sizes()
        weights = sizes / sizes.mean()  # w_i = n_i / mean n
        active = participants(ctx, r, self.participation)
        jobs = []
        for i in active:
            wi = float(weights[i])
            reg = Regulariser(
                mu=self.alpha / wi,
                anchor={p: w[p] - drift[i][p] for p in names},  # alpha_i/2 ||theta - (w - h_i)||^2
                linear={p: g[p] / wi - g_clients[i][p] for p in names},  # <theta, G/w_i - G_i>
            )
            jobs.append(ctx.job(w, (i,), self.conditioned, seed=(r, i), regulariser=reg))
        replies = aggregate(ctx, active, ctx.engine.train(ctx.spec(self.conditioned), jobs))
        active, results = replies.clients, replies.results

        lr, beta = ctx.sgd.lr, ctx.sgd.momentum
        n = ctx.federation.num_clients
        new_drift, new_g_clients = list(drift), list(g_clients)
        for i, res in zip(active, results):
            wi = float(weights[i])
            delta = {p: res.params[p] - w[p] for p in names}  # theta_i - w
            scale = 1.0 / (lr * effective_steps(res.steps, beta))
            new_drift[i] = {p: drift[i][p] + delta[p] for p in names}
            new_g_clients[i] = {p: g_clients[i][p] - g[p] / wi - delta[p] * scale for p in names}
        new_g = {
            p: g[p] + sum(float(weights[i]) * (new_g_clients[i][p] - g_clients[i][p]) for i in active) / n
            for p in names
        }

        mean = replies.average(uniform=True)  # uniform over P
        mean_drift = {p: sum(d[p] for d in new_drift) / n for p in names}  # over all N clients
        new_w = {p: mean[p] + mean_drift[p] if p in mean_drift else mean[p] for p in mean}
        return State(
            models=(new_w,),
            assignment=state.assignment,
            round=r + 1,
            train_loss=replies.loss,
            extra={"g": new_g, "g_clients": tuple(new_g_clients), "drift": tuple(new_drift)},
        )
