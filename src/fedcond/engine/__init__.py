"""Local training for many models at once; algorithms describe jobs, the engine runs them."""

from .local_sgd import Job, JobResult, LoopEngine, Params, SGDConfig, batch_order, clone_params, predict, weighted_average

__all__ = ["Job", "JobResult", "LoopEngine", "Params", "SGDConfig", "batch_order", "clone_params", "predict", "weighted_average"]
