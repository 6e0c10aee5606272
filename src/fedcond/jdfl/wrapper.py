"""JDFL as a plug-in: any single-model federated optimiser, with the expanded head and its targets.

The wrapper does not subclass or edit its base. It runs discovery once (init), then hands the
base a context whose model has M x C outputs and whose loss hook gives each client's jobs
their targets (`Context.job` and FedProc's classification term call it) and whose `scores` collapse
the expanded head to the C classes at prediction. Everything the base
does (control variates, dynamic regularisers, drift, prototypes, aggregation) is unchanged.
With M = 1 the context is the base's own, so the run is the base algorithm's, bit for bit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..algorithms.base import Algorithm
from ..errors import FedcondError
from .discovery import Discovery, DiscoveryConfig, discover
from .targets import COLLAPSES, DRAWS, SCHEMES, JointLabelLoss, collapse, default_alpha, graded_weights


HEAD_INITS = ("fresh", "replicate")


def replicated_head(ctx, slots: int) -> dict:
    """The base's initial weights (same stream as the base draws) with the C-way head tiled over the
    M slots, slot-major: with identical slots the collapsed (sum) prediction and the body's
    gradient start exactly as the base's, and the slots separate as they learn the domains."""
    import torch

    from .discovery import layer_names

    key = ("jdfl-replicated", slots)
    if key not in ctx._cache:
        w = ctx.init_params(False)
        with torch.random.fork_rng(devices=[]):
            head = set(layer_names(ctx.spec(False).build(), "A"))
        ctx._cache[key] = {k: (v.repeat(slots, *([1] * (v.ndim - 1))) if k in head else v) for k, v in w.items()}
    return ctx._cache[key]


@dataclass(frozen=True)
class Supervision:
    """What a JDFL context carries: per-client targets and the class-only collapse."""

    scheme: str
    slots: int
    num_classes: int
    domains: tuple[int, ...]  # z_i per client
    weights: tuple[tuple[float, ...], ...]  # graded mass per slot, per pseudo-domain
    phi: float
    how: str  # collapse: sum | max
    draw: str = "step"  # random: per step or fixed per sample

    def loss(self, members: tuple[int, ...], seed: tuple[int, ...]) -> JointLabelLoss:
        if len(members) != 1:
            raise FedcondError("JDFL targets are per client: a job must hold one client's data")
        z = self.domains[members[0]]
        return JointLabelLoss(
            self.scheme,
            self.slots,
            self.num_classes,
            own=z,
            weights=self.weights[z],
            phi=self.phi,
            seed=seed,
            draw=self.draw,
        )

    def collapse(self, logits):
        return collapse(logits, self.slots, self.how)


@dataclass(frozen=True)
class JDFL(Algorithm):
    base: object  # the wrapped algorithm (a frozen dataclass of the registry)
    scheme: str = "graded"  # graded | random | hard (the ablation's client-fixed joint labels)
    slots: int | None = None  # M; None: the elbow of discovery's inertia curve
    e0: int = 3  # discovery's local epochs
    discovery_batch: int | None = None  # None: the run's batch size
    layers: str = "B"  # discovery's layer subset (A, B or C)
    max_slots: int = 8  # the elbow searches M = 1..max_slots
    alpha: float | None = None  # graded: mass on the own slot; None: 0.55 if M <= 5 else 0.45
    tau: float = 0.1  # graded: temperature of the centroid-similarity softmax
    phi: float = 1.0  # random: mass of the drawn slot
    draw: str = "step"  # random: the slot drawn anew per sample at every step (step) or fixed per sample (sample)
    collapse: str = "sum"  # class-only prediction: sum (default) or max of the slots' probabilities
    head_init: str = "fresh"  # fresh: the M x C model drawn anew | replicate: the base's own initial
    #   weights with its C-way head copied into every slot (the collapsed output starts as the base's)

    needs_truth = False

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise FedcondError(f"unknown JDFL scheme '{self.scheme}'; choose {', '.join(SCHEMES)}")
        if self.collapse not in COLLAPSES:
            raise FedcondError(f"unknown collapse '{self.collapse}'; choose {' or '.join(COLLAPSES)}")
        if not getattr(self.base, "federated", False) or getattr(self.base, "conditioned", False):
            raise FedcondError(f"JDFL wraps a plain federated optimiser, not {type(self.base).__name__}")
        if self.alpha is not None and not 0.0 < self.alpha <= 1.0:
            raise FedcondError(f"alpha must be in (0, 1], got {self.alpha}")
        if self.tau <= 0 or not 0.0 < self.phi <= 1.0:
            raise FedcondError(f"JDFL needs tau > 0 and phi in (0, 1], got tau={self.tau}, phi={self.phi}")
        if self.head_init not in HEAD_INITS:
            raise FedcondError(f"unknown head_init '{self.head_init}'; choose {' or '.join(HEAD_INITS)}")
        if self.draw not in DRAWS:
            raise FedcondError(f"unknown draw '{self.draw}'; choose {' or '.join(DRAWS)}")
        if self.draw != "step" and self.scheme != "random":
            raise FedcondError(f"draw={self.draw} applies to the random scheme only, not {self.scheme}")
        DiscoveryConfig(self.e0, self.discovery_batch, self.layers, self.slots, self.max_slots)  # validates

    @property
    def conditioned(self) -> bool:
        return False

    @property
    def federated(self) -> bool:
        return True

    def discovery_config(self) -> DiscoveryConfig:
        return DiscoveryConfig(self.e0, self.discovery_batch, self.layers, self.slots, self.max_slots)

    def supervision(self, disc: Discovery, num_classes: int) -> Supervision:
        alpha = self.alpha if self.alpha is not None else default_alpha(disc.slots)
        weights = tuple(
            tuple(float(v) for v in graded_weights(z, disc.centroid_cos, alpha, self.tau)) for z in range(disc.slots)
        )
        return Supervision(
            self.scheme, disc.slots, num_classes, disc.domains, weights, self.phi, self.collapse, self.draw
        )

    def context(self, ctx, disc: Discovery):
        """The base's context: M x C outputs and per-client targets (M = 1: the context unchanged)."""
        if disc.slots == 1:
            return ctx
        c = ctx.federation.num_classes
        plain = dataclasses.replace(ctx.plain_model, num_classes=disc.slots * c)
        initial = replicated_head(ctx, disc.slots) if self.head_init == "replicate" else None
        supervision = self.supervision(disc, c)
        return dataclasses.replace(
            ctx,
            plain_model=plain,
            loss_hook=supervision.loss,
            scores=supervision.collapse,
            initial_params=initial,
            _cache=ctx._cache,
        )

    def evaluation_context(self, ctx, state):
        return self.context(ctx, state.extra["jdfl"])

    def _tag(self, state, disc: Discovery):
        metrics = {
            **state.metrics,
            "pseudo_domains": disc.slots,
            "elbow": disc.elbow,
            "pseudo_domain_of_client": list(disc.domains),
        }
        return dataclasses.replace(state, extra={**state.extra, "jdfl": disc}, clusters=disc.domains, metrics=metrics)

    def init(self, ctx):
        disc = discover(ctx, self.discovery_config())
        return self._tag(self.base.init(self.context(ctx, disc)), disc)

    def round(self, ctx, state, r: int):
        disc = state.extra["jdfl"]
        return self._tag(self.base.round(self.context(ctx, disc), state, r), disc)
