"""Test helpers shared by several test files (fixtures live in conftest.py)."""

import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedcond.engine import LoopEngine

SHARED = Path(os.environ.get("FEDCOND_DATA", Path(__file__).resolve().parents[2] / "shared" / "datasets"))


def tagged_dataset(n_train=600, n_test=200, num_classes=10, shape=(28, 28), seed=0):
    """Images whose first two pixels spell their index, so every sample can be traced through a split."""
    rng = np.random.default_rng(seed)

    def make(n, offset):
        x = rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
        ids = np.arange(n) + offset
        x[:, 0, 0], x[:, 0, 1] = ids % 256, ids // 256
        y = np.arange(n) % num_classes
        return x, y.astype(np.int64)

    x_tr, y_tr = make(n_train, 0)
    x_te, y_te = make(n_test, 50_000)
    return SimpleNamespace(name="tagged", x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te,
                           classes=tuple(str(c) for c in range(num_classes)), coarse_train=None, coarse_test=None, coarse_classes=None)


def sample_ids(x: torch.Tensor) -> list[int]:
    return (x[:, 0, 0, 0].long() + 256 * x[:, 0, 0, 1].long()).tolist()


def shared_file(name: str) -> Path:
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"{path} not present (set FEDCOND_DATA)")
    return path


def rows_so_far(db: Path, query: str) -> list[tuple]:
    """Rows of a results database another process is still creating: none until its schema is written
    (the file appears before the table does, so a poll can see an empty database)."""
    if not Path(db).exists():
        return []
    con = sqlite3.connect(db)
    try:
        return con.execute(query).fetchall()
    except sqlite3.OperationalError as err:
        if "no such table" not in str(err):
            raise
        return []
    finally:
        con.close()


class DroppingEngine(LoopEngine):
    """The simulator's engine, except that one client's reply is lost in one round."""

    def __init__(self, sgd, client: int, call: int):
        super().__init__(sgd)
        self.client, self.call, self.calls = client, call, 0

    def train(self, spec, jobs):
        self.calls += 1
        results = super().train(spec, jobs)
        if self.calls == self.call:
            results[self.client] = None
        return results


class RecordingEngine(LoopEngine):
    """The loop engine, keeping every (spec, job) it is sent (what a method's rounds ask the clients to run)
    and every call's (jobs, results) (what the clients sent back)."""

    def __init__(self, sgd):
        super().__init__(sgd)
        self.sent: list[tuple] = []
        self.calls: list[tuple] = []

    def train(self, spec, jobs):
        self.sent += [(spec, job) for job in jobs]
        results = super().train(spec, jobs)
        self.calls.append((jobs, results))
        return results


def small_e1_scenario():
    """E1 (two clusters of three clients) on a small tagged dataset: enough for a method's first rounds."""
    from fedcond.scenarios import make_scenario

    data = tagged_dataset(n_train=240, n_test=80)
    return make_scenario("E1", "mnist", lambda n: data, k=2, clients_per_cluster=3, seed=0)


@dataclass
class FakeResult:
    """The MethodResult fields results.save_run reads: a row for a test database without training."""

    accuracy: float
    accuracy_std: float = 0.01
    weighted_accuracy: float | None = None
    per_client: list = field(default_factory=lambda: [0.9, 0.8])
    seconds: float = 1.0
    rounds: int = 1
    hyperparameters: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


def script_module(path: Path):
    """A script of the repository (probes/, scripts/: folders that are no package) imported as a module,
    with its folder on the path, as when it runs (a probe imports probe_output beside it)."""
    import importlib.util
    import sys

    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
