"""The CPU fast path: jobs spread over single-thread worker processes.

Why processes and not threads or vmap, measured on the 2-core machines: two single-thread
processes train at ~92% of twice one core, one two-thread process slowed 5-12x whenever
anything else ran, and `torch.func.vmap` over client models was 0.27x a plain loop at 50
clients. Each worker runs exactly `train_job` of the loop backend with one thread, so its
results are bitwise those of `LoopEngine` (a test checks it).

Tensors travel through torch's multiprocessing reductions, i.e. as shared-memory handles:
a client's data is moved to shared memory on its first trip and is never copied again.
"""

from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor

import torch
import torch.multiprocessing  # noqa: F401  (registers the shared-memory tensor reductions)

from .local_sgd import Job, JobResult, SGDConfig, train_job

_models: dict = {}  # worker side: one working model per ModelSpec


def _init_worker() -> None:
    torch.set_num_threads(1)


def _train_chunk(spec, jobs: list[Job], sgd: SGDConfig) -> list[JobResult]:
    if spec not in _models:
        _models[spec] = spec.build().to(memory_format=torch.channels_last)
    return [train_job(_models[spec], job, sgd) for job in jobs]


class PoolEngine:
    """Same interface as LoopEngine; `workers` single-thread processes, started once and reused."""

    name = "pool"

    def __init__(self, sgd: SGDConfig = SGDConfig(), workers: int = 2):
        self.sgd = sgd
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = mp.get_context("spawn")  # no inherited OpenMP state, same on every OS
            self._pool = ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_init_worker)
        return self._pool

    def train(self, spec, jobs: list[Job]) -> list[JobResult]:
        if len(jobs) <= 1:  # nothing to spread; skip the round trip
            from .local_sgd import LoopEngine

            return LoopEngine(self.sgd).train(spec, jobs)
        chunks = _balanced_chunks(jobs, self.workers * 4)  # a few chunks per worker evens out unequal clients
        futures = [self._executor().submit(_train_chunk, spec, [jobs[i] for i in chunk], self.sgd) for chunk in chunks]
        out: list[JobResult | None] = [None] * len(jobs)
        for chunk, fut in zip(chunks, futures):
            for i, res in zip(chunk, fut.result()):
                out[i] = res
        return out  # type: ignore[return-value]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __del__(self):
        self.close()


def _balanced_chunks(jobs: list[Job], n_chunks: int) -> list[list[int]]:
    """Job indices in n_chunks groups of similar work (samples x epochs), largest first (LPT)."""
    order = sorted(range(len(jobs)), key=lambda i: -len(jobs[i].y) * jobs[i].epochs)
    n_chunks = max(1, min(n_chunks, len(jobs)))
    loads, chunks = [0] * n_chunks, [[] for _ in range(n_chunks)]
    for i in order:
        k = loads.index(min(loads))
        chunks[k].append(i)
        loads[k] += len(jobs[i].y) * jobs[i].epochs
    return [sorted(c) for c in chunks if c]
