"""JDFL's supervision on the expanded head (SPEC C.2-C.4) and the class-only collapse.

The head has M x C outputs, laid out slot-major: output m * C + c is (pseudo-domain m, class c).
A client in pseudo-domain z trains with one of three targets for a sample of class y:
- graded: alpha on (z, y); the rest, 1 - alpha, spread over (m, y) for m != z by a softmax of
  cos(centroid_z, centroid_m) / tau;
- random: per sample and per step, a slot m drawn uniformly gets phi on (m, y) (phi = 1: one-hot);
  the rest, 1 - phi, is spread evenly over the other slots of y. `draw="sample"` fixes each
  sample's slot for the whole run instead (a seeded hash of its pixels, so no index is needed);
- hard (the ablation): one-hot on (z, y), fixed for the client.
Every target puts all its mass on class y, so collapsing the slots gives the ordinary label.
With M = 1 every scheme is plain cross-entropy, computed by the same call as the base algorithm's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import FedcondError

SCHEMES = ("graded", "random", "hard")
COLLAPSES = ("sum", "max")
DRAWS = ("step", "sample")  # the random scheme's slot: drawn anew at every step, or fixed per sample


def sample_slots(x: torch.Tensor, slots: int, salt: int) -> torch.Tensor:
    """A slot in [0, slots) per sample, fixed by the sample's content: its pixels (the engine's uint8
    images, or floats, rounded to 1/1024) dotted with seeded integer weights in exact int64
    arithmetic (the same on every batch and machine), then mixed. Pixels below 2^11 in magnitude
    keep the sum far below 2^63."""
    flat = torch.round(x.detach().reshape(x.shape[0], -1).double() * 1024).long()
    g = torch.Generator().manual_seed(int(np.random.SeedSequence([0x5108, salt]).generate_state(1)[0]))
    w = torch.randint(1, 1 << 20, (flat.shape[1],), generator=g, dtype=torch.long).to(flat.device)
    h = (flat * w).sum(1)
    h = (h ^ (h >> 29)) * 0x5851F42D4C957F2D  # mix the low bits (wraps in int64, as intended)
    return torch.remainder(h >> 17, slots)


def default_alpha(slots: int) -> float:
    """SPEC C.3: alpha = 0.55 when M <= 5, else 0.45."""
    return 0.55 if slots <= 5 else 0.45


def graded_weights(own: int, centroid_cos: np.ndarray, alpha: float, tau: float) -> np.ndarray:
    """Mass per slot [M] for a client of pseudo-domain `own`: alpha on it, 1 - alpha over the others
    by softmax(cos(c_own, c_m) / tau). Sums to one; with M = 1 it is [1]."""
    m = centroid_cos.shape[0]
    w = np.zeros(m)
    if m == 1:
        return np.ones(1)
    others = np.array([j for j in range(m) if j != own])
    logits = centroid_cos[own, others] / tau
    soft = np.exp(logits - logits.max())
    w[others] = (1.0 - alpha) * soft / soft.sum()
    w[own] = alpha
    return w


@dataclass(frozen=True, eq=False)
class JointLabelLoss:
    """(logits [B, M*C], y [B]) -> scalar: the loss of one client's job. Picklable (worker processes)."""

    scheme: str
    slots: int  # M
    num_classes: int  # C
    own: int = 0  # the client's pseudo-domain z
    weights: tuple[float, ...] = ()  # graded: mass per slot [M]
    phi: float = 1.0  # random: mass of the drawn slot
    seed: tuple[int, ...] = ()  # random: names this job's stream of slot draws (its first entry: the run's seed)
    draw: str = "step"  # random: a slot per sample and step, or fixed per sample (DRAWS)
    _gen: list = field(default_factory=list, repr=False)  # the lazily made generator (made where the job runs)

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise FedcondError(f"unknown JDFL scheme '{self.scheme}'; choose {', '.join(SCHEMES)}")
        if self.draw not in DRAWS:
            raise FedcondError(f"unknown draw '{self.draw}'; choose {' or '.join(DRAWS)}")

    def _generator(self) -> torch.Generator:
        if not self._gen:
            g = torch.Generator()
            g.manual_seed(int(np.random.SeedSequence([0x5107, *self.seed]).generate_state(1)[0]))
            self._gen.append(g)
        return self._gen[0]

    def __call__(self, logits: torch.Tensor, y: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        M, C = self.slots, self.num_classes
        if M == 1:
            return F.cross_entropy(logits, y)
        if self.scheme == "hard":
            return F.cross_entropy(logits, self.own * C + y)
        if self.scheme == "random":
            if self.draw == "sample":
                if x is None:
                    raise FedcondError("the random scheme with draw=sample needs the inputs to fix each sample's slot")
                m = sample_slots(x, M, self.seed[0] if self.seed else 0)
            else:
                m = torch.randint(0, M, y.shape, generator=self._generator())
            if self.phi == 1.0:
                return F.cross_entropy(logits, m * C + y)
            w = torch.full((y.shape[0], M), (1.0 - self.phi) / (M - 1), dtype=logits.dtype)
            w[torch.arange(y.shape[0]), m] = self.phi
        else:
            w = torch.as_tensor(self.weights, dtype=logits.dtype).expand(y.shape[0], M)  # [B, M]
        logp = F.log_softmax(logits, dim=1).view(-1, M, C)  # [B, M, C]
        logp_y = logp.gather(2, y.view(-1, 1, 1).expand(-1, M, 1)).squeeze(2)  # [B, M]: log p(m, y)
        return -(w * logp_y).sum(1).mean()

    def target(self, y: torch.Tensor) -> torch.Tensor:
        """The full target distribution [B, M*C] of the deterministic schemes (for tests and inspection)."""
        M, C = self.slots, self.num_classes
        t = torch.zeros(y.shape[0], M, C, dtype=torch.float64)
        if M == 1 or self.scheme == "hard":
            t[torch.arange(y.shape[0]), 0 if M == 1 else self.own, y] = 1.0
        elif self.scheme == "graded":
            t[torch.arange(y.shape[0]), :, y] = torch.as_tensor(self.weights, dtype=torch.float64)
        else:
            raise FedcondError("the random scheme's target is drawn per step; see __call__")
        return t.view(y.shape[0], M * C)


def collapse(logits: torch.Tensor, slots: int, how: str = "sum") -> torch.Tensor:
    """Class scores [B, C] from expanded logits [B, M*C]: the M slots' probabilities of each class,
    summed (default) or their max. With M = 1 the argmax equals that of the logits."""
    if how not in COLLAPSES:
        raise FedcondError(f"unknown collapse '{how}'; choose {' or '.join(COLLAPSES)}")
    if slots == 1:
        return logits
    p = F.softmax(logits.float(), dim=1).view(logits.shape[0], slots, -1)  # [B, M, C]
    return p.sum(1) if how == "sum" else p.amax(1)
