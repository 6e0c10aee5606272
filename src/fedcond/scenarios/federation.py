"""What a scenario builds: the clients' data, and the ground truth kept apart from it.

Algorithms receive a `Federation`; only the evaluation code and algorithms that are
*meant* to know the clusters (Oracle) receive the `GroundTruth`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass(frozen=True, eq=False)  # tensors have no truth value: compare by identity
class ClientData:
    """One client's private data. Images stay uint8 until a batch is drawn (4x less memory)."""

    x_train: torch.Tensor  # uint8 [n_train, C, H, W]
    y_train: torch.Tensor  # int64 [n_train], task labels
    x_test: torch.Tensor  # uint8 [n_test, C, H, W]
    y_test: torch.Tensor  # int64 [n_test]

    @property
    def n_train(self) -> int:
        return int(self.y_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.y_test.shape[0])


@dataclass(frozen=True)
class Federation:
    """The clients of one scenario, as the algorithms see them."""

    family: str
    dataset: str
    clients: tuple[ClientData, ...]
    num_classes: int  # C, width of the task's label space
    input_shape: tuple[int, int, int]  # (C, H, W)
    mean: tuple[float, ...]  # per-channel normalisation applied to x / 255
    std: tuple[float, ...]
    label_names: tuple[str, ...] = ()
    params: dict = field(default_factory=dict)  # the builder's arguments, for the results database

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def sizes(self) -> np.ndarray:
        return np.array([c.n_train for c in self.clients])

    def label_counts(self) -> np.ndarray:
        """[clients, classes] training-label counts (scenario describe and its picture, the report's)."""
        return np.stack([np.bincount(c.y_train.numpy(), minlength=self.num_classes) for c in self.clients])


@dataclass(frozen=True)
class GroundTruth:
    """What only evaluation and oracles may see: each client's true cluster. `known` False: the
    scenario has no true clusters (e.g. Dirichlet label skew); every client is then in one cluster
    named 'none', which only groups the clients for per-cluster bookkeeping (hold-outs)."""

    cluster: np.ndarray  # int64 [num_clients]
    cluster_names: tuple[str, ...]
    known: bool = True

    @property
    def num_clusters(self) -> int:
        return len(self.cluster_names)


@dataclass(frozen=True)
class Scenario:
    federation: Federation
    truth: GroundTruth
