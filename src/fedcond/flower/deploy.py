"""A real deployment on one machine: a SuperLink and one SuperNode per client, as separate processes
on loopback, and `flwr run` submitting a fedcond run to them (docs/flower.md shows the same by hand).

By default the federation runs over TLS with authenticated SuperNodes (docs/flower.md,
"Deployment"): the SuperLink serves a certificate from the federation's own CA and admits only the
SuperNodes whose Flower authentication keys were registered with it (`--enable-supernode-auth`),
and each SuperNode gets the secure sum's roster and its identity, so the key check is on.
`insecure=True` is plain HTTP with self-registering nodes: for a quick test on loopback only.

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
from .keys import FederationKeys, make_federation_keys

APP_PYPROJECT = {
    "build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"},
    "project": {
        "name": "fedcond-flower",
        "version": "1.0.0",
        "description": "fedcond's ServerApp and ClientApp",
        "license": "MIT",
        "dependencies": ["fedcond"],
    },
    "tool": {
        "hatch": {"build": {"targets": {"wheel": {"packages": ["."]}}}},
        "flwr": {
            "app": {
                "publisher": "fedcond",
                "components": {
                    "serverapp": "fedcond.flower.apps:server_app",
                    "clientapp": "fedcond.flower.apps:client_app",
                },
                "config": {"fedcond-run": "", "out": ""},
            }
        },
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

    Security: TLS and SuperNode authentication with the keys in `keys` (a folder made by
    `fedcond flower keys --nodes CLIENTS`), or with new ones made in the work folder
    when `keys` is None; `insecure=True` turns both off (loopback experiments only).

    As in Flower, a federation outlives some of its SuperNodes: `submit` gives up only when the
    SuperLink exits or fewer than `min_available` SuperNodes are left (default: a majority). What
    the run does without a node's replies is the run's own rule (FlowerRun.min_replies)."""

    def __init__(
        self,
        clients: int,
        workdir: Path,
        data_dir: str | None = None,
        min_available: int | None = None,
        keys: Path | None = None,
        insecure: bool = False,
    ):
        self.clients, self.workdir = clients, Path(workdir).resolve()  # absolute: the processes run inside it
        self.data_dir = data_dir
        self.min_available = clients // 2 + 1 if min_available is None else min_available
        if not 1 <= self.min_available <= clients:
            raise FedcondError(f"min_available must be between 1 and the {clients} SuperNodes, got {min_available}")
        if insecure and keys is not None:
            raise FedcondError("an insecure deployment uses no keys: give keys or insecure=True, not both")
        self.insecure, self.keys_folder = insecure, keys
        self.keys: FederationKeys | None = None
        self.procs: list[subprocess.Popen] = []
        self.http_port = free_port()  # Flower 1.42: the Fleet, ServerAppIo and Control APIs share one HTTP port
        self.flwr_home = self.workdir / "flwr-home"
        self.env = {**os.environ, "FLWR_HOME": str(self.flwr_home), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "w")
        proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.workdir, start_new_session=True
        )
        self.procs.append(proc)
        return proc

    def _load_keys(self) -> FederationKeys:
        if self.keys_folder is None:
            return make_federation_keys(self.workdir / "keys", self.clients)
        keys = FederationKeys(Path(self.keys_folder).resolve())
        try:
            nodes = keys.nodes
        except (OSError, ValueError) as e:
            raise FedcondError(f"{self.keys_folder} is not a folder made by `fedcond flower keys` ({e})") from None
        if nodes != self.clients:  # the roster's size is the federation's: it sets the secure sum's default min_peers
            raise FedcondError(
                f"{self.keys_folder} holds keys for {nodes} SuperNodes, not one per each of the {self.clients} clients"
            )
        return keys

    def superlink_args(self) -> list[str]:
        args = [
            _bin("flower-superlink"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.http_port),
            "--database",
            str(self.workdir / "state.db"),
            "--disable-runtime-dependency-installation",
        ]
        if self.keys is None:
            return args + ["--insecure"]
        return args + [
            "--ssl-ca-certfile",
            str(self.keys.ca),
            "--ssl-certfile",
            str(self.keys.superlink_cert),
            "--ssl-keyfile",
            str(self.keys.superlink_key),
            "--enable-supernode-auth",
        ]

    def supernode_args(self, i: int) -> list[str]:
        config = f"partition-id={i}" + (f' data-dir="{self.data_dir}"' if self.data_dir else "")
        args = [_bin("flower-supernode"), "--superlink", self.address, "--port", str(free_port())]
        if self.keys is None:
            return args + ["--insecure", "--node-config", config]
        config += f' secagg-roster="{self.keys.roster}" secagg-identity="{self.keys.identity(i)}"'
        return args + [
            "--root-certificates",
            str(self.keys.ca),
            "--auth-supernode-private-key",
            str(self.keys.auth_key(i)),
            "--node-config",
            config,
        ]

    def __enter__(self) -> "LocalDeployment":
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.flwr_home.mkdir(exist_ok=True)
        self.keys = None if self.insecure else self._load_keys()
        trust = {"insecure": True} if self.keys is None else {"root-certificates": str(self.keys.ca)}  # for `flwr`
        connection = {"address": self.address, **trust}
        (self.flwr_home / "config.toml").write_text(
            tomli_w.dumps({"superlink": {"default": "fedcond", "fedcond": connection}})
        )
        try:
            self._start("superlink", self.superlink_args())
            self._wait_for_port(self.http_port, "SuperLink")
            for i in range(self.clients if self.keys is not None else 0):
                self.register(self.keys.auth_pub(i))
            for i in range(self.clients):
                self._start(f"supernode-{i}", self.supernode_args(i))
        except BaseException:  # `with` does not call __exit__ when __enter__ fails: stop what did start
            self.stop()
            raise
        return self

    def register(self, public_key: Path) -> None:
        """Admit a SuperNode's authentication key (`flwr supernode register`, over the Control API)."""
        self._flwr(["supernode", "register", str(public_key), "fedcond"], f"flwr supernode register {public_key}")

    def _flwr(self, args: list[str], what: str) -> None:
        """One `flwr` command against this federation's Control API; its last output line in the error."""
        done = subprocess.run(
            [_bin("flwr"), *args], env=self.env, cwd=self.workdir, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise FedcondError(f"{what} failed: {(done.stdout + done.stderr).strip().splitlines()[-1:]}")

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
        self._flwr(["run", str(app), "fedcond", "--run-config", str(overrides)], "flwr run")
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
                raise FedcondError(
                    f"only {alive} of {len(nodes)} SuperNodes are running (min_available={self.min_available}; "
                    f"logs in {self.workdir})"
                )
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
