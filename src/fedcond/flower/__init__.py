"""Real federated runs over Flower (https://flower.ai): the only package that imports `flwr`.

The server runs our algorithms' own round code; its engine ships each training job (weights and
hyper-parameters, never data) to the client that owns the data, which rebuilds the job from its
own data and statistics and trains it with the reference `train_job`. See docs/flower.md.
"""

from __future__ import annotations

from ..errors import FedcondError


def require_flwr() -> None:
    """A one-line error, not an ImportError traceback, where the optional extra is missing."""
    try:
        import flwr  # noqa: F401
    except ImportError:
        raise FedcondError("Flower is not installed; pip install 'fedcond[flower]'") from None
