"""The ServerApp and ClientApp objects Flower loads, for simulation and for SuperLink deployment.

Deployment (`flwr run`) hands the ServerApp its run config: `fedcond-run` is a FlowerRun as JSON
and `out` (optional) a file for the result. See docs/flower.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from ..errors import FedcondError
from .client import app as client_app
from .config import FlowerRun
from .server import serve


def make_server_app(
    runs: list[FlowerRun] | None = None, sink: Callable[[dict], None] | None = None, wrap_grid: Callable | None = None
) -> ServerApp:
    """A ServerApp that serves `runs` one after another on the same SuperNodes (or the one run in
    Flower's run config), handing each result, or {"error": ...} for a run that stopped with a
    FedcondError, to `sink` (or writing them to the run config's `out` as a JSON list).
    `wrap_grid` lets tests see every message."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        todo = runs or [FlowerRun.from_json(str(context.run_config["fedcond-run"]))]
        grid = wrap_grid(grid) if wrap_grid else grid
        results = []
        for run in todo:
            try:
                result = serve(grid, run)
            except FedcondError as e:  # the next run starts afresh (every client resets on hello)
                result = {"method": run.method, "error": str(e)}
            results.append(result)
            if sink is not None:
                sink(result)
        out = context.run_config.get("out")
        if out:
            Path(str(out)).write_text(json.dumps(results))

    return app


server_app = make_server_app()

__all__ = ["client_app", "make_server_app", "server_app"]
