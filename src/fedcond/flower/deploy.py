"""A real deployment on one machine: a SuperLink and one SuperNode per client, as separate processes
on loopback, and `flwr run` submitting a fedcond run to them (docs/flower.md shows the same by hand).

Each SuperNode is told its client index by `--node-config partition-id=I` and builds only that
client's data; the ServerApp and ClientApps run in processes the SuperLink and SuperNodes spawn
(Flower's default subprocess isolation). The app project handed to `flwr run` only names the
ServerApp and ClientApp objects of the installed fedcond package.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import tomli_w

from ..errors import FedcondError
from .config import FlowerRun

APP_PYPROJECT = {
    "build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"},
    "project": {"name": "fedcond-flower", "version": "1.0.0", "description": "fedcond's ServerApp and ClientApp",
                "license": "MIT", "dependencies": ["fedcond"]},
    "tool": {
        "hatch": {"build": {"targets": {"wheel": {"packages": ["."]}}}},
        "flwr": {"app": {"publisher": "fedcond",
                         "components": {"serverapp": "fedcond.flower.apps:server_app", "clientapp": "fedcond.flower.apps:client_app"},
                         "config": {"fedcond-run": "", "out": ""}}},
    },
}


def write_app(folder: Path) -> Path:
    """The Flower app project `flwr run` builds and submits."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(tomli_w.dumps(APP_PYPROJECT))
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bin(name: str) -> str:
    path = Path(sys.executable).with_name(name)
    return str(path) if path.exists() else (shutil.which(name) or name)


class LocalDeployment:
    """SuperLink + SuperNodes as child processes; `with` stops them (SIGTERM, then SIGKILL).

    As in Flower, a federation outlives some of its SuperNodes: `submit` gives up only when the
    SuperLink exits or fewer than `min_available` SuperNodes are left (default: a majority). What
    the run does without a node's replies is the run's own rule (FlowerRun.min_replies)."""

    def __init__(self, clients: int, workdir: Path, data_dir: str | None = None, min_available: int | None = None):
        self.clients, self.workdir = clients, Path(workdir)
        self.data_dir = data_dir
        self.min_available = clients // 2 + 1 if min_available is None else min_available
        if not 1 <= self.min_available <= clients:
            raise FedcondError(f"min_available must be between 1 and the {clients} SuperNodes, got {min_available}")
        self.procs: list[subprocess.Popen] = []
        self.http_port = free_port()  # Flower 1.42: the Fleet, ServerAppIo and Control APIs share one HTTP port
        self.flwr_home = self.workdir / "flwr-home"
        self.env = {**os.environ, "FLWR_HOME": str(self.flwr_home), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

    def _start(self, name: str, args: list[str]) -> None:
        log = open(self.workdir / f"{name}.log", "w")
        self.procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.workdir,
                                           start_new_session=True))

    def __enter__(self) -> "LocalDeployment":
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.flwr_home.mkdir(exist_ok=True)
        (self.flwr_home / "config.toml").write_text(tomli_w.dumps(
            {"superlink": {"default": "fedcond", "fedcond": {"address": f"127.0.0.1:{self.http_port}", "insecure": True}}}))
        self._start("superlink", [_bin("flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(self.http_port),
                                  "--database", str(self.workdir / "state.db"),
                                  "--disable-runtime-dependency-installation"])
        self._wait_for_port(self.http_port, "SuperLink")
        for i in range(self.clients):
            config = f"partition-id={i}" + (f' data-dir="{self.data_dir}"' if self.data_dir else "")
            self._start(f"supernode-{i}", [_bin("flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{self.http_port}",
                                           "--port", str(free_port()), "--node-config", config])
        return self

    def _wait_for_port(self, port: int, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
                return
            except OSError:
                if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                    raise FedcondError(f"the {what} did not start (log in {self.workdir})") from None
                time.sleep(0.2)

    def submit(self, run: FlowerRun, out: Path, timeout: float = 600.0) -> list[dict]:
        """`flwr run` the fedcond app with `run`; wait for the ServerApp's result file."""
        app = write_app(self.workdir / "app")
        overrides = self.workdir / "run-config.toml"
        overrides.write_text(tomli_w.dumps({"fedcond-run": run.to_json(), "out": str(out)}))
        done = subprocess.run([_bin("flwr"), "run", str(app), "fedcond", "--run-config", str(overrides)], env=self.env,
                              cwd=self.workdir, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise FedcondError(f"flwr run failed: {(done.stdout + done.stderr).strip().splitlines()[-1:]}")
        return self.wait_for_result(out, timeout)

    def wait_for_result(self, out: Path, timeout: float, poll: float = 0.5) -> list[dict]:
        deadline = time.monotonic() + timeout
        while not out.exists():
            if time.monotonic() > deadline:
                raise FedcondError(f"no result from the deployment within {timeout:.0f} s (logs in {self.workdir})")
            superlink, nodes = self.procs[0], self.procs[1:]
            if superlink.poll() is not None:
                raise FedcondError(f"the SuperLink exited early (logs in {self.workdir})")
            alive = sum(p.poll() is None for p in nodes)
            if alive < self.min_available:
                raise FedcondError(f"only {alive} of {len(nodes)} SuperNodes are running (min_available={self.min_available}; "
                                   f"logs in {self.workdir})")
            time.sleep(poll)
        time.sleep(0.2)  # the file is written in one call; give it a moment to be complete
        return json.loads(out.read_text())

    def __exit__(self, *exc) -> None:
        self.stop()

    def _groups_alive(self) -> list[int]:
        alive = []
        for p in self.procs:
            try:
                os.killpg(p.pid, 0)  # signal 0: is any process of this group still alive?
                alive.append(p.pid)
            except ProcessLookupError:
                pass
        return alive

    def stop(self, grace: float = 15.0) -> dict:
        """Stop the SuperNodes, then the SuperLink, with SIGTERM to the process groups this deployment
        started (nothing else); SIGKILL only for one still running after `grace` seconds.
        Returns the exit codes, how many needed SIGKILL, and how many groups still had a process."""
        if getattr(self, "_stopped", None) is not None:
            return self._stopped
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline, killed = time.monotonic() + grace, 0
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                killed += 1
        alive = self._groups_alive()
        while alive and time.monotonic() < deadline:  # children (SuperExec, ClientApps) finish their own shutdown
            time.sleep(0.2)
            alive = self._groups_alive()
        for pgid in alive:
            os.killpg(pgid, signal.SIGKILL)
        left = len(alive)
        self._stopped = {"codes": [p.returncode for p in self.procs], "killed": killed, "groups_left": left}
        return self._stopped
