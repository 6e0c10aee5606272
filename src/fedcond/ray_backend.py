"""Sweeps beyond one machine: cells run as Ray tasks; only the driver writes the database.

Each task rebuilds its scenario from the spec (deterministic given the seed), trains one method
with one thread, and returns the result to the driver, which records it the moment it arrives
(`sweep.run_sweep` does the recording, so resume semantics are the same as without Ray).
The only module that imports `ray` (an optional extra: pip install 'fedcond[ray]').
"""

from __future__ import annotations

import os
import socket
from typing import Iterator

from .errors import FedcondError

WORKER_NICENESS_ENV = "RAY_worker_niceness"
PROBE_SECONDS = 5.0  # how long joining waits for a cluster's port to answer before saying it cannot be reached
CLIENT_PORT = 10001  # Ray Client's default (ray://host without a port)


def workers_at_our_priority() -> None:
    """Ray starts its workers at niceness 15, below every ordinary process, so that its drivers come
    first; here the workers do all the training, and on a machine running anything else they
    starved (a Flower simulation beside two sweeps made no progress for minutes). Call before Ray
    starts on this machine (its raylet reads the variable); a value the user set wins, and joining a
    running cluster keeps that cluster's."""
    os.environ.setdefault(WORKER_NICENESS_ENV, "0")


def _cell(spec, method: str, protocol, seed: int, denormal_mode: str = "flush", plugins: tuple[str, ...] = ()):
    import torch

    from .engine import denormals
    from .errors import FedcondError as Err
    from .plugin_loading import import_plugins
    from .results import versions
    from .run import Failure
    from .simulate import run_method

    os.environ[denormals.ENV] = denormal_mode  # the driver's mode (checked there), which its rows record
    denormals.apply()
    torch.set_num_threads(1)
    try:  # the node's versions (CPU, torch), which its row records, not the driver's
        import_plugins(plugins)  # the driver's --plugin modules (installed on the node, or in Ray's working_dir)
        return run_method(spec.build(), method, protocol, seed, data_dir=spec.data_dir), versions()
    except Err as e:
        return Failure.of(method, e), versions()


def run_cells_on_ray(
    tasks: list[tuple], address: str | None, plugins: tuple[str, ...] | None = None
) -> Iterator[tuple[int, object, dict]]:
    """tasks: (spec, method, protocol, seed) each; yields (task index, MethodResult | Failure, the versions
    where it ran: results.versions() on its node) as they finish. `plugins`: modules each task imports
    first (None: the driver's --plugin modules, plugin_loading; each node must be able to import them).

    address: "local" starts a private Ray instance on this machine, whatever cluster RAY_ADDRESS or
    a previous `ray start` names; "auto" (that cluster), "host:port" or "ray://host:port" joins one.
    A cluster that does not answer is a FedcondError within PROBE_SECONDS (_check_reachable).
    """
    try:
        import ray
    except ImportError:
        raise FedcondError("--ray needs Ray: pip install 'fedcond[ray]'") from None
    started = False
    if not ray.is_initialized():
        if address != "local":
            _check_reachable(address)
        workers_at_our_priority()
        try:  # "local", not None: None joins whatever cluster RAY_ADDRESS or Ray's address file names
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, TimeoutError) as e:  # answered the probe, but is not a Ray cluster we can join
            raise FedcondError(f"--ray {address}: cannot join the Ray cluster: {_first_line(e)}") from None
        started = True
    try:
        from .engine import denormals

        remote = ray.remote(num_cpus=1)(_cell)
        from .plugin_loading import loaded_modules

        mode = denormals.wanted()  # nodes do not share the driver's environment
        plugins = loaded_modules() if plugins is None else tuple(plugins)
        refs = {remote.remote(*t, mode, plugins): i for i, t in enumerate(tasks)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield refs[ref], *ray.get(ref)
    finally:
        if started:
            ray.shutdown()


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _check_reachable(address: str) -> None:
    """Raise FedcondError (one line) unless something listens where `address` leads, within
    PROBE_SECONDS: Ray itself retries a dead address for 35 s (ray://) to minutes (a stale address
    file), then raises a traceback."""
    target = (os.environ.get("RAY_ADDRESS") or address) if address == "auto" else address
    if "://" in target:  # Ray Client
        hostport = target.split("://", 1)[1].rstrip("/")
        if ":" not in hostport:
            hostport = f"{hostport}:{CLIENT_PORT}"
    else:
        try:
            from ray._private.services import canonicalize_bootstrap_address
        except ImportError:  # moved in another Ray version: ray.init's own errors still become one line
            return
        try:  # "auto": RAY_ADDRESS, else the address a `ray start` left in Ray's temp folder, else a running GCS
            hostport = canonicalize_bootstrap_address(target)
        except (ConnectionError, ValueError) as e:
            raise FedcondError(f"--ray {address}: {_first_line(e)}") from None
        if hostport is None:
            raise FedcondError(f"--ray {address}: no running Ray cluster found")
    host, _, port = hostport.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_SECONDS).close()
    except (OSError, ValueError) as e:
        via = " (from RAY_ADDRESS or the address file a `ray start` left)" if address == "auto" else ""
        raise FedcondError(
            f"--ray {address}: no Ray cluster answers at {hostport}{via}: "
            f"{getattr(e, 'strerror', None) or _first_line(e)}; start one (ray start --head) "
            "or use --ray local"
        ) from None
