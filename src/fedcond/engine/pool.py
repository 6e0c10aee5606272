"""The CPU fast path: jobs spread over single-thread worker processes.

Why processes and not threads or vmap, measured on the 2-core machines: two single-thread
processes train at ~92% of twice one core, one two-thread process slowed 5-12x whenever
anything else ran, and `torch.func.vmap` over client models was 0.27x a plain loop at 50
clients. Each worker runs exactly `train_job` of the loop backend with one thread, so its
results are bitwise those of `LoopEngine` (a test checks it).

Work travels as plain pickled bytes, one payload per chunk of jobs (weights shared by its jobs
are stored once), not through torch's shared-memory reductions, which pass one file descriptor
per tensor. Trained weights come back through one shared-memory block per call: each worker
writes its clients' rows, and the main process copies the block once, instead of unpickling
~1.7 MB per client from a pipe while the workers wait to hand over.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.shared_memory import SharedMemory

import torch

from .local_sgd import Job, JobResult, LoopEngine, SGDConfig, cpu_model, mean_loss, train_job
from .memory import keep_freed_memory

_models: dict = {}  # worker side: one working model per ModelSpec


def _init_worker(plugins: tuple[str, ...] = ()) -> None:
    import signal

    from ..orphans import die_with_parent
    from ..plugin_loading import import_plugins

    die_with_parent()  # a run killed with SIGKILL takes its workers with it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops the workers
    torch.set_num_threads(1)
    keep_freed_memory()
    import_plugins(plugins)  # the parent's --plugin modules: a ModelSpec may name a plug-in's network


def _model(spec):
    if spec not in _models:
        _models[spec] = cpu_model(spec)
    return _models[spec]


def _train_chunk(payload: bytes) -> bytes:
    cpu = time.process_time()
    spec, jobs, sgd, block = pickle.loads(payload)
    results = [train_job(_model(spec), job, sgd) for job in jobs]
    if block is not None:  # float weights go to the shared block; the pickle keeps the rest
        name, rows, layout = block
        shm = SharedMemory(name=name)
        try:
            flat = torch.frombuffer(shm.buf, dtype=torch.float32)
            width = sum(n for _, _, n in layout)
            for row, res in zip(rows, results):
                flat[row * width : (row + 1) * width].copy_(
                    torch.cat([res.params[k].reshape(-1) for k, _, _ in layout])
                )
                for k, _, _ in layout:
                    del res.params[k]
            del flat  # release the exported buffer before closing
        finally:
            shm.close()
    return pickle.dumps((results, time.process_time() - cpu), protocol=pickle.HIGHEST_PROTOCOL)


def _loss_chunk(payload: bytes) -> bytes:
    cpu = time.process_time()
    spec, items = pickle.loads(payload)
    losses = [mean_loss(_model(spec), *item) for item in items]
    return pickle.dumps((losses, time.process_time() - cpu), protocol=pickle.HIGHEST_PROTOCOL)


class PoolEngine:
    """Same interface as LoopEngine; `workers` single-thread processes, started once and reused."""

    name = "pool"

    def __init__(self, sgd: SGDConfig = SGDConfig(), workers: int = 2, plugins: tuple[str, ...] = ()):
        self.sgd = sgd
        self.workers = workers
        self.plugins = tuple(plugins)
        self._pool: ProcessPoolExecutor | None = None
        self._local = LoopEngine(sgd)  # single jobs skip the round trip
        # CPU seconds the workers spent on this engine's chunks (each measures its own, unpickling
        # included): with this process's own time, what a run cost in core-seconds (simulate.py)
        self.worker_cpu_seconds = 0.0

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = mp.get_context("spawn")  # no inherited OpenMP state, same on every OS
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=ctx, initializer=_init_worker, initargs=(self.plugins,)
            )
        return self._pool

    def train(self, spec, jobs: list[Job]) -> list[JobResult]:
        if len(jobs) <= 1:  # nothing to spread; skip the round trip
            return self._local.train(spec, jobs)
        work = [len(j.y) * j.epochs for j in jobs]
        layout = [(k, tuple(v.shape), v.numel()) for k, v in jobs[0].params.items() if v.dtype == torch.float32]
        width = sum(n for _, _, n in layout)
        shm = SharedMemory(create=True, size=max(1, len(jobs) * width * 4))
        try:
            results = self._spread(_train_chunk, spec, jobs, work, self.sgd, block=(shm.name, layout))
            view = torch.frombuffer(shm.buf, dtype=torch.float32, count=len(jobs) * width)  # [n_jobs * width]
            for i, res in enumerate(results):
                offset, params = i * width, {}
                for k, shape, n in layout:
                    # a copy per entry: a view into the block would drag the whole block into any later pickle
                    params[k] = view[offset : offset + n].view(shape).clone()
                    offset += n
                params.update(res.params)  # non-float entries (batch counters) came by pickle
                res.params = {k: params[k] for k in jobs[i].params}  # the state_dict's own order
            del view  # release the exported buffer before closing
        finally:
            shm.close()
            shm.unlink()
        return results

    def losses(self, spec, items: list[tuple]) -> list[float]:
        if len(items) <= 1:
            return self._local.losses(spec, items)
        return self._spread(_loss_chunk, spec, items, [len(item[2]) for item in items])

    def _spread(self, fn, spec, items: list, work: list[int], *extra, block=None) -> list:
        # two chunks per worker: enough to even out unequal clients, few enough that the
        # hand-over gaps between chunks stay small
        chunks = _balanced_chunks(work, self.workers * 2)
        payload = lambda chunk: (  # noqa: E731
            (spec, [items[i] for i in chunk], *extra) + (((block[0], chunk, block[1]),) if block is not None else ())
        )
        futures = [
            self._executor().submit(fn, pickle.dumps(payload(chunk), protocol=pickle.HIGHEST_PROTOCOL))
            for chunk in chunks
        ]
        out: list = [None] * len(items)
        for chunk, fut in zip(chunks, futures):
            results, cpu = pickle.loads(fut.result())
            self.worker_cpu_seconds += cpu
            for i, res in zip(chunk, results):
                out[i] = res
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def terminate(self) -> None:
        """Stop now (an interrupt): the workers' jobs in flight are abandoned."""
        if self._pool is not None:
            terminate_pool(self._pool)
            self._pool = None

    def __del__(self):
        self.close()


def terminate_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a process pool at once: cancel what has not started, end the workers and reap them, so
    an interrupted run leaves no process, shared memory or semaphore behind. Results the caller
    already holds are unaffected; what the workers were computing is lost."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=10)
    pool.shutdown(wait=True)


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
