"""Helpers of the Flower tests: a grid that records every message the server receives, and the
session's runs, served one after another in a single Flower simulation (one Ray start for all)."""

from __future__ import annotations

from fedcond.protocol import PAPER

TWO_ROUNDS = PAPER.replace(epochs=2)  # 2 rounds x 1 local epoch
THREE_ROUNDS = PAPER.replace(epochs=3)
DP_NOISE, DP_CLIP, DP_DELTA = 1.0, 1.0, 1e-5


class RecordingGrid:
    """Delegates to Flower's grid and keeps every message that comes back to the server."""

    def __init__(self, grid, received: list):
        self._grid, self.received = grid, received

    def __getattr__(self, name):
        return getattr(self._grid, name)

    def send_and_receive(self, messages, *, timeout=None):
        replies = list(self._grid.send_and_receive(messages, timeout=timeout))
        self.received.extend(replies)
        return replies

    def pull_messages(self, message_ids):
        replies = list(self._grid.pull_messages(message_ids))
        self.received.extend(replies)
        return replies


def session_runs(spec, n: int, checkpoint: str) -> dict:
    from fedcond.flower.config import DPConfig, FlowerRun

    def run(method, protocol=TWO_ROUNDS, **kw):
        return FlowerRun(spec=spec, method=method, clients=n, protocol=protocol, **kw)

    return {
        "FedAvg": run("FedAvg"), "IFCA": run("IFCA"), "FedProx": run("FedProx"), "SCAFFOLD": run("SCAFFOLD"),
        "FedDyn": run("FedDyn"),
        "Conditional": run("Conditional-FedAvg"),
        "Conditional-class_means": run("Conditional-FedAvg", TWO_ROUNDS.replace(statistic="class_means")),
        "Conditional-log": run("Conditional-FedAvg", normalisation="log"),
        "Ditto": run("Ditto"),
        "dropout": run("FedAvg", drop=((1, 1),), min_replies=5),  # client 1 fails in round 2
        "crash": run("SCAFFOLD", THREE_ROUNDS, checkpoint=checkpoint, min_replies=n, drop=((0, 2),)),  # stops in round 3
        "resume": run("SCAFFOLD", THREE_ROUNDS, checkpoint=checkpoint, min_replies=n),  # a restarted server
        "DP": run("Conditional-FedAvg", dp=DPConfig(DP_NOISE, DP_CLIP, DP_DELTA)),
    }


def run_session(runs: dict) -> dict:
    """name -> (result, messages the server received during that run)."""
    from fedcond.flower.simulation import simulate_all

    received, bounds = [], [0]
    results = simulate_all(list(runs.values()), workers=1, wrap_grid=lambda grid: RecordingGrid(grid, received),
                           sink=lambda result: bounds.append(len(received)))
    return {name: (res, received[bounds[k]:bounds[k + 1]]) for k, (name, res) in enumerate(zip(runs, results))}
