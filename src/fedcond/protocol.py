"""The training protocol's named defaults, in one place (SPEC A.4, A.5 and the choices we made).

`epochs` counts passes over every client's data: pooled and per-client methods train that many
epochs; federated methods run epochs / local_epochs rounds of local_epochs each (the sources
say only "20 epochs": default 20 rounds x 1 local epoch).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .errors import FedcondError


INPUTS = ("standardised", "raw")

# The precision each dataset's grid runs under on a CPU with bf16 instructions, where a validation
# against fp32 adopted one (docs/choices.md: CIFAR-10, issue 42, stop 53); absent: fp32, the paper's.
# It is never switched on by itself: a sweep asks for it (--precision bf16) and its rows say so.
GRID_PRECISION: dict[str, str] = {"cifar10": "bf16"}


def input_normalisation(protocol: "Protocol", mean: tuple[float, ...], std: tuple[float, ...]):
    """(mean, std) the network standardises x / 255 with: the federation's, or none for raw inputs."""
    if protocol.inputs == "raw":
        return tuple(0.0 for _ in mean), tuple(1.0 for _ in std)
    return mean, std


def conditioning_of(alg, protocol: "Protocol") -> str:
    """How `alg`'s model takes s: its own `conditioning` field where it has one set, else the protocol's."""
    return getattr(alg, "conditioning", None) or protocol.conditioning


@dataclass(frozen=True)
class Protocol:
    epochs: int = 20  # SPEC A.4
    local_epochs: int = 1  # federated methods: epochs per round
    lr: float = 0.01
    momentum: float = 0.9
    batch_size: int = 64
    num_eigenvalues: int = 32  # l, SPEC A.2
    stats_normalisation: str = "zscore"  # zscore (paper) | log (reveals nothing) | none
    stats_method: str = "exact"  # exact (d x d covariance + eigvalsh) | randomized
    conditioning: str = "concat"  # concat (paper) | film (ablation)
    encoder_source: str | None = None  # CIFAR phi: the cross-trained encoder's source; None = the paper's
    #   partner (cifar10 <- cifar100, cifar100 <- cifar10); on machines without CIFAR-100 use pacs32
    statistic: str = (
        "eigenvalues"  # what conditioned models receive (stats.STATISTICS); random: the fingerprint control
    )
    holdout_clients: int = 0  # per true cluster, kept out of training and evaluated as newcomers (holdout.py)
    eval_every: int = (
        0  # evaluate every this many rounds (and after the last): the curve, best-round accuracy; 0: final only
    )
    precision: str = "fp32"  # local SGD arithmetic: fp32 (paper) | bf16 (autocast, fp32 weights; engine/precision.py)
    model: str | None = None  # a network by name (models.registry, plug-ins' too); None: the choice by input shape
    # what the network sees: standardised (x / 255 - mean) / std per channel (fedcond's default) | raw x / 255
    #   in [0, 1] (the paper never mentions standardising inputs; a reading probed for Gossip, issue 40)
    inputs: str = "standardised"
    # each epoch's partial last batch: kept (fedcond's default) | dropped, as DataLoader(drop_last=True) does
    #   (the paper does not say; at super sparse ~300 samples a client make 5 steps an epoch or 4; issue 40)
    drop_last: bool = False

    @property
    def rounds(self) -> int:
        return max(1, self.epochs // self.local_epochs)

    def validate(self) -> "Protocol":
        for name in ("epochs", "local_epochs", "batch_size", "num_eigenvalues"):
            if getattr(self, name) < 1:
                raise FedcondError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise FedcondError(f"lr must be positive, got {self.lr}")
        if not 0 <= self.momentum < 1:
            raise FedcondError(f"momentum must be in [0, 1), got {self.momentum}")
        if self.eval_every < 0:
            raise FedcondError(f"eval_every must be >= 0, got {self.eval_every}")
        if self.holdout_clients < 0:
            raise FedcondError(f"holdout_clients must be >= 0, got {self.holdout_clients}")
        if self.inputs not in INPUTS:
            raise FedcondError(f"inputs must be one of {', '.join(INPUTS)}, got '{self.inputs}'")
        from .engine.precision import check_name
        from .stats import check_statistic

        check_statistic(self.statistic)
        check_name(self.precision)
        if self.model is not None:
            from .models.registry import canonical_model

            object.__setattr__(self, "model", canonical_model(self.model))  # as registered, whatever the case given
        return self

    def as_record(self) -> dict:
        """The protocol as rows and checkpoints record it; `model` only where one is named, so the
        record of a run on the default networks is what it was before models had names."""
        d = dataclasses.asdict(self)
        if d["model"] is None:
            del d["model"]
        return d

    def replace(self, **changes) -> "Protocol":
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None}).validate()


PAPER = Protocol()

# JDFL's protocol (SPEC C.5, C.8). The text gives only "SGD with learning rate 0.01, no weight decay";
# the rest is ours, chosen by probes of FedAvg on PACS (docs/choices.md, "JDFL's protocol"):
# momentum: plain SGD (the text's words) was still rising 1.1 pp over rounds 50-60 (no plateau
# within the budget), so momentum 0.9 (the other paper's); rounds: with it, the best accuracy so
# far gains less than 0.5 pp over 10 rounds from round 94 on, so 100 rounds.
JDFL_ROUNDS = 100
JDFL_PROTOCOL = Protocol(epochs=JDFL_ROUNDS, momentum=0.9, eval_every=1)
