"""Local training for many models at once; algorithms describe jobs, the engine runs them.

Backends share one interface, `train(model_spec, jobs) -> results` (in job order):
- `LoopEngine`: the reference, one job after another in this process;
- `PoolEngine`: the CPU fast path, jobs over single-thread worker processes (bitwise equal);
- `VmapEngine`: the GPU path, clients as stacked parameters under torch.func.vmap (float-equal).
"""

from typing import Union

from . import denormals
from .local_sgd import (
    Job,
    JobResult,
    LoopEngine,
    Params,
    Regulariser,
    SGDConfig,
    batch_order,
    channels_last,
    clone_params,
    mean_loss,
    mix,
    predict,
    train_job,
    weighted_average,
)
from .pool import PoolEngine
from .vmap import VmapEngine

Engine = Union[LoopEngine, PoolEngine, VmapEngine]

try:  # this thread flushes subnormals from the start, so what runs before the first job computes alike
    denormals.apply()
except Exception:  # noqa: BLE001 - a bad FEDCOND_DENORMALS is reported, one line, where it is used
    pass


def check_device(device: str) -> str:
    """`device` if torch can use it here; a one-line FedcondError otherwise (e.g. cuda on a CPU-only torch)."""
    import torch

    from ..errors import FedcondError

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise FedcondError(f"unknown device '{device}'; use cpu, cuda or cuda:N") from None
    if dev.type == "cpu":
        return device
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise FedcondError(
                f"device '{device}' asked for, but this torch ({torch.__version__}) has no usable CUDA; "
                "use --device cpu or install a CUDA build of torch"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise FedcondError(f"device '{device}' does not exist: {torch.cuda.device_count()} CUDA device(s) here")
        return device
    if dev.type == "mps" and torch.backends.mps.is_available():
        return device
    raise FedcondError(f"device '{device}' is not available here; use cpu or cuda")


def make_engine(sgd: SGDConfig, workers: int = 1, device: str = "cpu", plugins: tuple[str, ...] = ()) -> Engine:
    """The fastest backend for the device: stacked-parameter vmap on a GPU; on a CPU a pool of
    single-thread workers when several cores are granted, else the loop. `plugins`: modules the
    pool's workers import before building a model (a plug-in's network by name)."""
    if device != "cpu":
        return VmapEngine(sgd, device=device)
    return PoolEngine(sgd, workers, plugins) if workers > 1 else LoopEngine(sgd)


__all__ = [
    "Engine",
    "Job",
    "JobResult",
    "LoopEngine",
    "Params",
    "PoolEngine",
    "SGDConfig",
    "batch_order",
    "channels_last",
    "check_device",
    "clone_params",
    "Regulariser",
    "VmapEngine",
    "make_engine",
    "mean_loss",
    "mix",
    "predict",
    "train_job",
    "weighted_average",
]
