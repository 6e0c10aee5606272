"""`fedcond flower simulate`: a run on Flower's simulation engine (Ray actors on this machine)."""

from __future__ import annotations

import logging
import os

from ..errors import FedcondError
from ..ray_backend import workers_at_our_priority
from .config import FlowerRun


def simulate(run: FlowerRun, workers: int = 1, wrap_grid=None) -> dict:
    """Run `run` with one simulated SuperNode per client; `workers` Ray actors (one CPU each) train them."""
    result = simulate_all([run], workers, wrap_grid)[0]
    if "error" in result:
        raise FedcondError(result["error"])
    return result


def simulate_all(runs: list[FlowerRun], workers: int = 1, wrap_grid=None, sink=None) -> list[dict]:
    """Several runs on the same simulated SuperNodes, one after another (one Ray start for all);
    a run that stops with an error gives {"error": ...} and the next one starts afresh."""
    if len({r.clients for r in runs}) != 1:
        raise FedcondError("runs sharing one simulation need the same number of clients")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # inherited by the Ray actors: one thread each
    workers_at_our_priority()
    from flwr.simulation import run_simulation

    from .apps import client_app, make_server_app

    out: list[dict] = []

    def keep(result: dict) -> None:
        out.append(result)
        if sink is not None:
            sink(result)

    server = make_server_app(runs, keep, wrap_grid)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    run_simulation(
        server,
        client_app,
        num_supernodes=runs[0].clients,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {"num_cpus": workers, "num_gpus": 0, "include_dashboard": False},
        },
    )
    if len(out) < len(runs):
        raise FedcondError("the Flower simulation ended early (see the log above for the server's error)")
    return out
