"""The CPU fast path: jobs spread over single-thread worker processes.

Why processes and not threads or vmap, measured on the 2-core machines: two single-thread
processes train at ~92% of twice one core, one two-thread process slowed 5-12x whenever
anything else ran, and `torch.func.vmap` over client models was 0.27x a plain loop at 50
clients. Each worker runs exactly `train_job` of the loop backend with one thread, so its
results are bitwise those of `LoopEngine` (a test checks it).

Work travels as plain pickled bytes, one payload per chunk of jobs, not through torch's
shared-memory reductions: those pass one file descriptor per tensor and cost ~2.5 s per round of
200 clients, while one pickle per chunk stores weights shared by its jobs once and costs ~0.1 s.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
from concurrent.futures import ProcessPoolExecutor

import torch

from .local_sgd import Job, JobResult, LoopEngine, SGDConfig, mean_loss, train_job

_models: dict = {}  # worker side: one working model per ModelSpec


def _init_worker() -> None:
    torch.set_num_threads(1)


def _model(spec):
    if spec not in _models:
        _models[spec] = spec.build().to(memory_format=torch.channels_last)
    return _models[spec]


def _train_chunk(payload: bytes) -> bytes:
    spec, jobs, sgd = pickle.loads(payload)
    return pickle.dumps([train_job(_model(spec), job, sgd) for job in jobs], protocol=pickle.HIGHEST_PROTOCOL)


def _loss_chunk(payload: bytes) -> bytes:
    spec, items = pickle.loads(payload)
    return pickle.dumps([mean_loss(_model(spec), *item) for item in items], protocol=pickle.HIGHEST_PROTOCOL)


class PoolEngine:
    """Same interface as LoopEngine; `workers` single-thread processes, started once and reused."""

    name = "pool"

    def __init__(self, sgd: SGDConfig = SGDConfig(), workers: int = 2):
        self.sgd = sgd
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._local = LoopEngine(sgd)  # single jobs skip the round trip

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = mp.get_context("spawn")  # no inherited OpenMP state, same on every OS
            self._pool = ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_init_worker)
        return self._pool

    def train(self, spec, jobs: list[Job]) -> list[JobResult]:
        if len(jobs) <= 1:  # nothing to spread; skip the round trip
            return self._local.train(spec, jobs)
        work = [len(j.y) * j.epochs for j in jobs]
        return self._spread(_train_chunk, spec, jobs, work, self.sgd)

    def losses(self, spec, items: list[tuple]) -> list[float]:
        if len(items) <= 1:
            return self._local.losses(spec, items)
        return self._spread(_loss_chunk, spec, items, [len(item[2]) for item in items])

    def _spread(self, fn, spec, items: list, work: list[int], *extra) -> list:
        # two chunks per worker: enough to even out unequal clients, few enough that the hand-over
        # gaps between chunks (a result is ~40 MB of weights per 25 clients) stay small
        chunks = _balanced_chunks(work, self.workers * 2)
        futures = [
            self._executor().submit(fn, pickle.dumps((spec, [items[i] for i in chunk], *extra), protocol=pickle.HIGHEST_PROTOCOL))
            for chunk in chunks
        ]
        out: list = [None] * len(items)
        for chunk, fut in zip(chunks, futures):
            for i, res in zip(chunk, pickle.loads(fut.result())):
                out[i] = res
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __del__(self):
        self.close()


def _balanced_chunks(work: list[int], n_chunks: int) -> list[list[int]]:
    """Item indices in n_chunks groups of similar total work, largest first (LPT scheduling)."""
    order = sorted(range(len(work)), key=lambda i: -work[i])
    n_chunks = max(1, min(n_chunks, len(work)))
    loads, chunks = [0] * n_chunks, [[] for _ in range(n_chunks)]
    for i in order:
        k = loads.index(min(loads))
        chunks[k].append(i)
        loads[k] += work[i]
    return [sorted(c) for c in chunks if c]
