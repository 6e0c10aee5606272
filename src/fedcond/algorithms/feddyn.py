"""FedDyn (Acar et al., "Federated Learning Based on Dynamic Regularization", ICLR 2021),
Algorithm 1, with the per-client coefficient of the authors' code (github.com/alpemreacar/FedDyn,
`train_FedDyn` / `train_feddyn_mdl` in utils_methods.py / utils_general.py).

State: server weights theta^{t-1}, server state h (zero at the start), and per client the
gradient state grad_k = "nabla L_k(theta_k^{t-1})" (zero at the start). Round t, for each
participating client k (the set P, m = N clients in all):

    theta_k^t = argmin  L_k(theta) - <grad_k, theta> + alpha_k/2 ||theta - theta^{t-1}||^2
                (approximately: `local_epochs` of SGD; the quadratic term is the squared norm)
    grad_k   <- grad_k - alpha_k (theta_k^t - theta^{t-1})

and the server sets

    h       <- h - alpha (1/m) sum_{k in P} (theta_k^t - theta^{t-1})
    theta^t  = (1/|P|) sum_{k in P} theta_k^t - (1/alpha) h.

Convention, following the authors' code where it is more specific than the paper:
- alpha_k = alpha / w_k with w_k = n_k / mean_j n_j (`alpha_coef_adpt = alpha_coef / weight_list`):
  clients with more data are held less tightly. With equal sizes alpha_k = alpha, the paper.
- The server state uses the global alpha and unweighted sums (the code's
  theta^t = mean_P theta_k + mean_all(sum of past drifts), which is the paper's h with alpha);
  the averages over clients are uniform, not size-weighted.
- The code stores -grad_k / alpha_k (the summed drifts); we store grad_k itself, the paper's
  quantity. Same iterates.
- Gradient clipping: the code clips every local step's gradient at norm 10
  (`torch.nn.utils.clip_grad_norm_(parameters=model.parameters(), max_norm=max_norm)`, max_norm 10);
  so does `max_grad_norm=10` here (the default; None switches it off). The clipped gradient is the
  whole one, the dynamic regulariser's terms included, as in the code where they are in the loss.
- What is evaluated: the code broadcasts theta^t (`cld_mdl_param`) but reports the accuracy of the
  plain average of the clients' models (`avg_mdl_param`, "all_clients" / "sel_clients" model).
  `evaluate="average"` (the default) does the same and records the server model theta^t's
  accuracy beside it (extra `server_model_accuracy`); `evaluate="server"` swaps the two.
Deviations from the code: no weight decay and no learning-rate decay across rounds (the
protocol's optimiser is used for every method). Buffers (batch-norm statistics) are averaged
uniformly and carry no state.

Momentum: the terms -grad_k + alpha_k (theta - theta^{t-1}) are added to each minibatch gradient
before the optimiser step, so momentum optimises the same local objective; the state updates come
from that objective's first-order condition, not from step counts, so they need no momentum
correction.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..engine import Regulariser
from ..errors import FedcondError
from .base import aggregate, check_participation, parameter_names, participants, Algorithm, Context, State
from .scaffold import zeros_like_params


@dataclass(frozen=True)
class FedDyn(Algorithm):
    alpha: float = 0.01  # dynamic-regulariser weight (the code's alpha_coef)
    participation: float = 1.0  # fraction of clients that train each round
    max_grad_norm: float | None = 10.0  # the authors' code clips local gradients at norm 10; None: no clipping
    evaluate: str = "average"  # average: the clients' plain average (what the code reports); server: theta^t

    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True

    def __post_init__(self):
        if self.alpha <= 0:
            raise FedcondError(f"FedDyn alpha must be positive (the server divides by it), got {self.alpha}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise FedcondError(f"FedDyn max_grad_norm must be positive or None, got {self.max_grad_norm}")
        if self.evaluate not in ("average", "server"):
            raise FedcondError(f"FedDyn evaluate must be average or server, got '{self.evaluate}'")
        check_participation(self.participation)

    def _state(self, theta, average, n: int, **kw) -> State:
        """models: (theta^t, the clients' plain average); clients predict with the one `evaluate` names,
        the other is evaluated beside it (State.alternates)."""
        main, other = (1, 0) if self.evaluate == "average" else (0, 1)
        alt = {1: "client_average", 0: "server_model"}[other]
        return State(models=(theta, average), assignment=(main,) * n, alternates={alt: other}, **kw)

    def client_alphas(self, ctx: Context) -> np.ndarray:
        """alpha_k = alpha / (n_k / mean n) for every client k."""
        sizes = ctx.federation.sizes().astype(np.float64)
        return self.alpha / (sizes / sizes.mean())

    def init(self, ctx: Context) -> State:
        theta = ctx.init_params(self.conditioned)
        names = parameter_names(ctx.spec(self.conditioned))
        n = ctx.federation.num_clients
        zero = zeros_like_params(theta, names)
        return self._state(theta, theta, n, extra={"h": zero, "grad": (zero,) * n})

    def round(self, ctx: Context, state: State, r: int) -> State:
        theta = state.models[0]
        h, grad = state.extra["h"], state.extra["grad"]
        names = tuple(h)
        alphas = self.client_alphas(ctx)
        active = participants(ctx, r, self.participation)
        clip = (
            {}
            if self.max_grad_norm is None
            else {"sgd": dataclasses.replace(ctx.sgd, max_grad_norm=self.max_grad_norm)}
        )
        jobs = [
            ctx.job(
                theta,
                (k,),
                self.conditioned,
                seed=(r, k),
                regulariser=Regulariser(mu=float(alphas[k]), anchor=theta, linear={p: -grad[k][p] for p in names}),
                **clip,
            )
            for k in active
        ]
        replies = aggregate(ctx, active, ctx.engine.train(ctx.spec(self.conditioned), jobs))
        active, results = replies.clients, replies.results

        m = ctx.federation.num_clients
        drift = {
            k: {p: res.params[p] - theta[p] for p in names} for k, res in zip(active, results)
        }  # theta_k^t - theta^{t-1}
        new_grad = list(grad)
        for k in active:
            new_grad[k] = {p: grad[k][p] - float(alphas[k]) * drift[k][p] for p in names}
        new_h = {p: h[p] - self.alpha / m * sum(drift[k][p] for k in active) for p in names}

        mean = replies.average(uniform=True)  # uniform over P
        new_theta = {p: mean[p] - new_h[p] / self.alpha if p in new_h else mean[p] for p in mean}
        return self._state(
            new_theta, mean, m, round=r + 1, train_loss=replies.loss, extra={"h": new_h, "grad": tuple(new_grad)}
        )
