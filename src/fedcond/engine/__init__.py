"""Local training for many models at once; algorithms describe jobs, the engine runs them.

Backends share one interface, `train(model_spec, jobs) -> results` (in job order):
- `LoopEngine`: the reference, one job after another in this process;
- `PoolEngine`: the CPU fast path, jobs over single-thread worker processes (bitwise equal).
"""

from typing import Union

from .local_sgd import (Job, JobResult, LoopEngine, Params, Regulariser, SGDConfig, batch_order, clone_params, mean_loss,
                        predict, train_job, weighted_average)
from .pool import PoolEngine

Engine = Union[LoopEngine, PoolEngine]


def make_engine(sgd: SGDConfig, workers: int = 1) -> Engine:
    """The fastest backend for this machine: a worker pool when several cores are granted, else the loop."""
    return PoolEngine(sgd, workers) if workers > 1 else LoopEngine(sgd)


__all__ = ["Engine", "Job", "JobResult", "LoopEngine", "Params", "PoolEngine", "SGDConfig", "batch_order", "clone_params",
           "Regulariser", "make_engine", "mean_loss", "predict", "train_job", "weighted_average"]
