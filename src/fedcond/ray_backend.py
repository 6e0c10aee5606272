"""Sweeps beyond one machine: cells run as Ray tasks; only the driver writes the database.

Each task rebuilds its scenario from the spec (deterministic given the seed), trains one method
with one thread, and returns the result to the driver, which records it the moment it arrives
(`sweep.run_sweep` does the recording, so resume semantics are the same as without Ray).
The only module that imports `ray` (an optional extra: pip install 'fedcond[ray]').
"""

from __future__ import annotations

import os
from typing import Iterator

from .errors import FedcondError

WORKER_NICENESS_ENV = "RAY_worker_niceness"


def workers_at_our_priority() -> None:
    """Ray starts its workers at niceness 15, below every ordinary process, so that its drivers come
    first; here the workers do all the training, and on a machine running anything else they
    starved (a Flower simulation beside two sweeps made no progress for minutes). Call before Ray
    starts on this machine (its raylet reads the variable); a value the user set wins, and joining a
    running cluster keeps that cluster's."""
    os.environ.setdefault(WORKER_NICENESS_ENV, "0")


def _cell(spec, method: str, protocol, seed: int, denormal_mode: str = "flush"):
    import torch

    from .engine import denormals
    from .errors import FedcondError as Err
    from .results import versions
    from .run import Failure
    from .simulate import run_method

    os.environ[denormals.ENV] = denormal_mode  # the driver's mode (checked there), which its rows record
    denormals.apply()
    torch.set_num_threads(1)
    try:  # the node's versions (CPU, torch), which its row records, not the driver's
        return run_method(spec.build(), method, protocol, seed, data_dir=spec.data_dir), versions()
    except Err as e:
        return Failure(method, str(e)), versions()


def run_cells_on_ray(tasks: list[tuple], address: str | None) -> Iterator[tuple[int, object, dict]]:
    """tasks: (spec, method, protocol, seed) each; yields (task index, MethodResult | Failure, the versions
    where it ran: results.versions() on its node) as they finish.

    address: "local" starts a Ray instance on this machine; "auto" or "ray://host:port" joins a cluster.
    """
    try:
        import ray
    except ImportError:
        raise FedcondError("--ray needs Ray: pip install 'fedcond[ray]'") from None
    started = False
    if not ray.is_initialized():
        workers_at_our_priority()
        ray.init(address=None if address == "local" else address, include_dashboard=False, log_to_driver=False)
        started = True
    try:
        from .engine import denormals

        remote = ray.remote(num_cpus=1)(_cell)
        mode = denormals.wanted()  # nodes do not share the driver's environment
        refs = {remote.remote(*t, mode): i for i, t in enumerate(tasks)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield refs[ref], *ray.get(ref)
    finally:
        if started:
            ray.shutdown()
