"""`fedcond flower simulate`: a run on Flower's simulation engine (Ray actors on this machine)."""

from __future__ import annotations

import logging
import os

from ..errors import FedcondError
from .config import FlowerRun


def simulate(run: FlowerRun, workers: int = 1, wrap_grid=None) -> dict:
    """Run `run` with one simulated SuperNode per client; `workers` Ray actors (one CPU each) train them."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # inherited by the Ray actors: one thread each
    from flwr.simulation import run_simulation

    from .apps import client_app, make_server_app

    out: list[dict] = []
    errors: list[BaseException] = []

    def sink(result: dict) -> None:
        out.append(result)

    server = make_server_app(run, sink, wrap_grid)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    run_simulation(server, client_app, num_supernodes=run.clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": workers, "num_gpus": 0, "include_dashboard": False}})
    if not out:
        raise FedcondError("the Flower simulation ended without a result (see the log above for the server's error)")
    return out[0]
