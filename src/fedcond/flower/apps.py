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

from .client import app as client_app
from .config import FlowerRun
from .server import serve


def make_server_app(run: FlowerRun | None = None, sink: Callable[[dict], None] | None = None,
                    wrap_grid: Callable | None = None) -> ServerApp:
    """A ServerApp for `run` (or the one in Flower's run config) that hands its result to `sink`
    (or writes it to the run config's `out`). `wrap_grid` lets tests see every message."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        this = run or FlowerRun.from_json(str(context.run_config["fedcond-run"]))
        result = serve(wrap_grid(grid) if wrap_grid else grid, this)
        if sink is not None:
            sink(result)
        out = context.run_config.get("out")
        if out:
            Path(str(out)).write_text(json.dumps(result))

    return app


server_app = make_server_app()

__all__ = ["client_app", "make_server_app", "server_app"]
