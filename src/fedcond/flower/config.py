"""One federated run, as plain data: what the ServerApp needs, and what travels in Flower's run config."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from ..errors import FedcondError
from ..protocol import Protocol
from ..scenarios import ScenarioSpec

NORMALISATIONS = ("secure-zscore", "log")


@dataclass(frozen=True)
class DPConfig:
    """DP-SGD on every client (Opacus): per-sample clipping at max_grad_norm, Gaussian noise of
    std noise_multiplier * max_grad_norm, Poisson-sampled batches; epsilon reported at delta."""

    noise_multiplier: float = 1.0
    max_grad_norm: float = 1.0
    delta: float = 1e-5


@dataclass(frozen=True)
class FlowerRun:
    spec: ScenarioSpec
    method: str
    clients: int  # SuperNodes the server waits for (one per client of the scenario)
    protocol: Protocol = Protocol()
    rounds: int | None = None  # default: protocol.rounds
    hyper: dict = field(default_factory=dict)
    seed: int = 0
    normalisation: str = "secure-zscore"  # how Conditional's statistics are normalised across clients
    min_replies: int = 1  # a round with fewer replies stops the run
    reply_timeout: float | None = 600.0  # seconds a round waits for replies; later ones count as dropped
    node_timeout: float = 120.0  # seconds to wait for all SuperNodes to connect
    checkpoint: str | None = None  # resume from here if present; written after every round
    dp: DPConfig | None = None
    experiment: str | None = None
    drop: tuple[tuple[int, int], ...] = ()  # fault injection for tests: (client, round) pairs that fail mid-round

    def __post_init__(self):
        if self.normalisation not in NORMALISATIONS:
            raise FedcondError(f"unknown normalisation '{self.normalisation}'; choose {', '.join(NORMALISATIONS)}")
        if self.min_replies < 1:
            raise FedcondError(f"min_replies must be at least 1, got {self.min_replies}")
        if self.rounds is not None and self.rounds < 1:
            raise FedcondError(f"rounds must be at least 1, got {self.rounds}")

    @property
    def num_rounds(self) -> int:
        return self.rounds if self.rounds is not None else self.protocol.rounds

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "FlowerRun":
        d = json.loads(text)
        d["spec"] = ScenarioSpec(**d["spec"])
        d["protocol"] = Protocol(**d["protocol"])
        d["dp"] = DPConfig(**d["dp"]) if d["dp"] else None
        d["drop"] = tuple(tuple(x) for x in d["drop"])
        return cls(**d)
