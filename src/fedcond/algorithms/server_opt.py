"""Server-side optimisers for the FedAvg family (Reddi et al., "Adaptive Federated Optimization",
ICLR 2021; FedAvgM: Hsu et al., "Measuring the Effects of Non-Identical Data Distribution", 2019).

The server treats the round's weighted average as a step: Delta_r = avg_i(w_i) - w_r (the
"pseudo-gradient", with the sign of a descent step), and
  avg       w_{r+1} = w_r + eta Delta_r                          (eta = 1: plain FedAvg, bit for bit)
  momentum  m_r = beta m_{r-1} + Delta_r;  w_{r+1} = w_r + eta m_r              (FedAvgM)
  adam      m_r = beta1 m_{r-1} + (1 - beta1) Delta_r
            v_r = beta2 v_{r-1} + (1 - beta2) Delta_r^2
            w_{r+1} = w_r + eta m_r / (sqrt(v_r) + tau)                        (FedAdam, Algorithm 2)
m_{-1} = v_{-1} = 0 and no bias correction, as in Reddi et al.'s algorithm box (Flower's FedAdam adds
one). Only floating-point weights take the step: batch norm's running statistics and counters are
averaged as FedAvg averages them (they are estimates, not weights a gradient moves).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..engine import Params
from ..errors import FedcondError

# kind -> the server learning rate used when none is given (adam's: the middle of Reddi et al.'s grid)
SERVER_OPTIMISERS = {"avg": 1.0, "momentum": 1.0, "adam": 1e-2}
# kind -> the fields its step reads (server_step); the others are inert under that kind
READS = {
    "avg": ("server_opt", "server_lr"),
    "momentum": ("server_opt", "server_lr", "server_momentum"),
    "adam": ("server_opt", "server_lr", "server_momentum", "server_beta2", "server_tau"),
}
BUFFERS = ("running_mean", "running_var")


def _steps(key: str, t: torch.Tensor) -> bool:
    return t.is_floating_point() and not key.endswith(BUFFERS)


@dataclass(frozen=True)
class ServerOptimiser:
    """The server's update as hyper-parameters of a FedAvg-family algorithm (a mixin of fields)."""

    server_opt: str = "avg"  # avg | momentum | adam
    server_lr: float | None = None  # None: the kind's default (SERVER_OPTIMISERS)
    server_momentum: float = 0.9  # beta (momentum) or beta1 (adam)
    server_beta2: float = 0.99  # adam
    server_tau: float = 1e-3  # adam's adaptivity

    def __post_init__(self):
        if self.server_opt not in SERVER_OPTIMISERS:
            raise FedcondError(f"server_opt must be one of {', '.join(SERVER_OPTIMISERS)}, got {self.server_opt!r}")
        if self.server_lr is not None and not self.server_lr > 0:
            raise FedcondError(f"server_lr must be > 0, got {self.server_lr}")
        if not (0 <= self.server_momentum < 1 and 0 <= self.server_beta2 < 1):
            raise FedcondError("server_momentum and server_beta2 must be in [0, 1)")
        if not self.server_tau > 0:
            raise FedcondError(f"server_tau must be > 0, got {self.server_tau}")

    @staticmethod
    def unread(kind: str) -> frozenset[str]:
        """The server-step fields a `kind` step does not read (beta for avg; adam's beta2 and tau for momentum)."""
        fields = {f.name for f in dataclasses.fields(ServerOptimiser)}
        return frozenset(fields - set(READS.get(kind, fields)))  # a kind not known here: nothing left out

    @property
    def eta(self) -> float:
        return SERVER_OPTIMISERS[self.server_opt] if self.server_lr is None else self.server_lr

    def server_step(self, w: Params, average: Params, slots: dict | None) -> tuple[Params, dict | None]:
        """(w_{r+1}, the optimiser's state to carry) from the broadcast weights w_r and the replies'
        average; `slots` is what the previous round returned (None in round 0)."""
        if self.server_opt == "avg" and self.eta == 1.0:
            return average, None  # FedAvg itself: no arithmetic, so bit for bit
        eta, b1, b2 = self.eta, self.server_momentum, self.server_beta2
        slots = slots or {"m": {}, "v": {}}
        new: Params = {}
        m_new: Params = {}
        v_new: Params = {}
        for k, avg in average.items():
            if not _steps(k, avg):
                new[k] = avg
                continue
            delta = avg - w[k]
            if self.server_opt == "avg":
                new[k] = w[k] + eta * delta
            elif self.server_opt == "momentum":
                m_new[k] = b1 * slots["m"].get(k, torch.zeros_like(delta)) + delta
                new[k] = w[k] + eta * m_new[k]
            else:
                m_new[k] = b1 * slots["m"].get(k, torch.zeros_like(delta)) + (1 - b1) * delta
                v_new[k] = b2 * slots["v"].get(k, torch.zeros_like(delta)) + (1 - b2) * delta * delta
                new[k] = w[k] + eta * m_new[k] / (v_new[k].sqrt() + self.server_tau)
        return new, ({"m": m_new, "v": v_new} if m_new else None)
