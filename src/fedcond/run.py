"""Run several methods on one scenario, spread over worker processes, one thread each.

Measured on the 2-core machines: two single-thread processes reach ~92% of twice one core,
while one two-thread process slowed 5-12x whenever anything else ran. So methods go to
separate processes (spawned, so no OpenMP state is inherited), each with torch at one thread,
and every worker rebuilds the scenario from its spec (deterministic given the seed).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.managers import SyncManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch

from .algorithms import make_algorithm
from .checkpoint import EVERY_SECONDS, Checkpoint
from .errors import FedcondError
from .engine import SGDConfig, make_engine
from .engine.pool import terminate_pool
from .orphans import die_with_parent
from .plugin_loading import import_plugins, loaded_modules
from .protocol import Protocol
from .scenarios import Scenario, ScenarioSpec
from .simulate import MethodResult, run_method


@dataclass(frozen=True)
class Failure:
    """A method that stopped with a FedcondError (e.g. diverged), yielded instead of raised on request."""

    method: str
    reason: str
    hyperparameters: dict = field(default_factory=dict)  # what ran, where the algorithm was built

    @classmethod
    def of(cls, method: str, e: FedcondError) -> Failure:
        return cls(method, str(e), getattr(e, "hyperparameters", {}))


class ScenarioUnavailable(FedcondError):
    """A worker could not build the scenario (data missing or damaged): nothing ran, unlike a Failure."""


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


# ---- worker side --------------------------------------------------------------------------------
_worker: dict = {}


def _init_worker(spec: ScenarioSpec, progress_queue, plugins: tuple[str, ...] = (), tracked: bool = False) -> None:
    import signal

    die_with_parent()  # a sweep killed with SIGKILL takes its workers with it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops the workers
    torch.set_num_threads(1)
    try:
        import_plugins(plugins)  # the parent's --plugin modules, before any name is resolved here
        _worker["scenario"] = spec.build()
    except FedcondError as e:  # an initializer's exception breaks the pool (a traceback): say it with each job instead
        _worker["unavailable"] = str(e)
    _worker["spec"] = spec
    _worker["queue"] = progress_queue
    _worker["tracked"] = tracked  # also send each round's metrics (run_methods' on_metrics)


def _run_in_worker(method: str, protocol: Protocol, seed: int, checkpoint: Checkpoint | None) -> MethodResult:
    if "unavailable" in _worker:
        raise ScenarioUnavailable(_worker["unavailable"])
    q = _worker["queue"]
    spec = _worker["spec"]
    return run_method(
        _worker["scenario"],
        method,
        protocol,
        seed,
        on_round=lambda r, s: q.put((method, r, None)),
        on_metrics=(lambda r, m: q.put((method, r, m))) if _worker["tracked"] else None,
        data_dir=spec.data_dir,
        checkpoint=checkpoint,
    )


def checkpoint_for(
    directory, spec: ScenarioSpec, method: str, protocol: Protocol, seed: int, every_seconds: float = EVERY_SECONDS
) -> Checkpoint | None:
    """The checkpoint of one run in `directory` (None: no checkpoints), named by what makes the run."""
    if directory is None:
        return None
    identity = {"scenario": spec.describe(), "method": method, "protocol": protocol.as_record(), "seed": seed}
    return Checkpoint(Path(directory), identity, every_seconds)


def rounds_of(method: str, protocol: Protocol) -> int:
    return protocol.rounds if make_algorithm(method).federated else protocol.epochs


def needs_missing_truth(family: str, method: str) -> bool:
    """Would `method` need true clusters that a `family` federation does not have (Oracle on dirichlet)?"""
    from .scenarios.families import CLUSTERLESS

    return family in CLUSTERLESS and make_algorithm(method).needs_truth


def run_methods(
    spec: ScenarioSpec,
    methods: list[str],
    protocol: Protocol,
    seed: int = 0,
    workers: int = 1,
    on_round: Callable[[str, int], None] | None = None,
    device: str = "cpu",
    failures: str = "raise",
    scenario: Scenario | None = None,
    checkpoints: "str | Path | None" = None,
    checkpoint_every: float = EVERY_SECONDS,
    plugins: tuple[str, ...] | None = None,
    on_metrics: Callable[[str, int, dict], None] | None = None,
) -> Iterator[MethodResult | Failure]:
    """Yield each method's result as soon as it finishes (in completion order).

    failures="return" yields a `Failure` for a method that raised FedcondError and goes on.
    `scenario`: the spec's scenario if the caller has already built it (worker processes rebuild their own).
    `checkpoints`: a directory where each run saves its progress every `checkpoint_every` seconds
    and resumes from it (fedcond.checkpoint); a run's file is removed once the caller has taken its
    result (the generator resumes after the yield, so after the caller recorded it).
    `on_metrics(method, round, metrics)`: every round's metrics (simulate.round_metrics), in this process.

    With at least as many methods as workers, methods run side by side, one per process; with
    fewer, they run one after another and their clients are spread over the workers instead.
    `plugins`: modules every worker process imports first (plugin_loading; None: those this
    process imported, `--plugin` and fedcond.load_plugins).
    """
    batch = _Batch(
        spec,
        tuple(methods),
        protocol,
        seed,
        workers,
        on_round,
        failures,
        checkpoints,
        checkpoint_every,
        loaded_modules() if plugins is None else tuple(plugins),
        on_metrics,
    )
    if workers <= 1 or len(methods) < workers or device != "cpu":
        yield from _run_in_process(batch, device, scenario)
    else:
        yield from _run_in_pool(batch)


@dataclass(frozen=True)
class _Batch:
    """What run_methods was asked, as both of its ways of running read it."""

    spec: ScenarioSpec
    methods: tuple[str, ...]
    protocol: Protocol
    seed: int
    workers: int
    on_round: Callable[[str, int], None] | None
    failures: str
    checkpoints: "str | Path | None"
    checkpoint_every: float
    plugins: tuple[str, ...]
    on_metrics: Callable[[str, int, dict], None] | None

    def checkpoint(self, method: str) -> Checkpoint | None:
        return checkpoint_for(self.checkpoints, self.spec, method, self.protocol, self.seed, self.checkpoint_every)


def _run_in_process(b: _Batch, device: str, scenario: Scenario | None) -> Iterator[MethodResult | Failure]:
    """One method after another in this process; their clients spread over `workers` (the engine's pool)."""
    torch.set_num_threads(1)
    import_plugins(b.plugins)
    scenario = scenario if scenario is not None else b.spec.build()
    engine = make_engine(SGDConfig.of(b.protocol), b.workers, device, b.plugins)
    on_round, on_metrics = b.on_round, b.on_metrics
    try:
        for m in b.methods:
            ckpt = b.checkpoint(m)
            try:
                yield run_method(
                    scenario,
                    m,
                    b.protocol,
                    b.seed,
                    engine=engine,
                    data_dir=b.spec.data_dir,
                    on_round=(lambda r, s, m=m: on_round(m, r)) if on_round else None,
                    checkpoint=ckpt,
                    on_metrics=(lambda r, x, m=m: on_metrics(m, r, x)) if on_metrics else None,
                )
            except FedcondError as e:
                if b.failures != "return":
                    raise
                yield Failure.of(m, e)
            if ckpt is not None:  # the caller has the result (or the failure): the progress is no longer needed
                ckpt.remove()
    except BaseException:  # interrupted (Ctrl-C, SIGTERM) or failed: stop the workers now, not after their jobs
        getattr(engine, "terminate", engine.close)()
        raise
    finally:
        engine.close()


def _run_in_pool(b: _Batch) -> Iterator[MethodResult | Failure]:
    """Methods side by side, one per worker process; results in completion order."""
    ctx = mp.get_context("spawn")
    manager = SyncManager(ctx=ctx)  # ctx.Manager(), with its server process dying with us too
    manager.start(die_with_parent)
    progress = manager.Queue()
    on_round, on_metrics = b.on_round, b.on_metrics
    pool = ProcessPoolExecutor(
        min(b.workers, len(b.methods)),
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(b.spec, progress, b.plugins, on_metrics is not None),
    )
    with pool:
        ckpts = {m: b.checkpoint(m) for m in b.methods}
        futures = {pool.submit(_run_in_worker, m, b.protocol, b.seed, ckpts[m]): m for m in b.methods}
        pending = set(futures)
        try:
            while pending:
                _drain(progress, on_round, on_metrics)
                done = [f for f in pending if f.done()]
                for f in done:
                    pending.discard(f)
                    _drain(progress, on_round, on_metrics)
                    try:
                        res = f.result()
                    except ScenarioUnavailable:
                        raise  # as the one-process path raises from spec.build(): the caller's "not run"
                    except FedcondError as e:
                        if b.failures != "return":
                            raise
                        res = Failure.of(futures[f], e)
                    yield res
                    if ckpts[futures[f]] is not None:
                        ckpts[futures[f]].remove()
                if not done:
                    try:
                        _deliver(progress.get(timeout=0.2), on_round, on_metrics)
                    except queue.Empty:
                        pass
        except BaseException:  # interrupted (Ctrl-C, SIGTERM) or failed: finished results are already yielded
            terminate_pool(pool)
            raise
        finally:
            manager.shutdown()


def _deliver(item: tuple, on_round, on_metrics) -> None:
    """A worker's message: (method, round, None) a round done, (method, round, metrics) its metrics."""
    method, r, metrics = item
    if metrics is None:
        if on_round:
            on_round(method, r)
    elif on_metrics:
        on_metrics(method, r, metrics)


def _drain(q, on_round, on_metrics=None) -> None:
    while True:
        try:
            item = q.get_nowait()
        except queue.Empty:
            return
        _deliver(item, on_round, on_metrics)
