"""The earlier study of the conditioning idea (SPEC Part B), in one package: synthetic federations and
the EMNIST study, their statistic and their named experiments.

- `generator`: clustered linear / logistic regression federations (cluster = covariance direction);
- `statistic`: the conditioning statistic, each client's first n_c sign-fixed PCA eigenvectors;
- `models`: conditional linear, ensemble, MLP, and the global / cluster / client references;
- `synthetic`: `run_synthetic(task, clusters, seed)` -> the table of the six models; `main()`;
- `emnist`: the EMNIST half (digits / uppercase / lowercase clusters), `run_emnist`, `main`;
- `registry`: the named experiments (`MCDC/linreg/3clusters`, `MCDC/emnist/nc=1`, ...).
"""

from .generator import TASKS, SyntheticFederation, generate
from .models import MODELS, TrainConfig
from .registry import EXPERIMENTS, StudyExperiment, record
from .statistic import client_statistics, eigvec_statistic, fix_sign, leading_eigenvectors
from .synthetic import StudyResult, fit_and_score, format_table, main, run_synthetic

__all__ = [
    "EXPERIMENTS",
    "MODELS",
    "StudyExperiment",
    "record",
    "TASKS",
    "StudyResult",
    "SyntheticFederation",
    "TrainConfig",
    "client_statistics",
    "eigvec_statistic",
    "fit_and_score",
    "fix_sign",
    "format_table",
    "generate",
    "leading_eigenvectors",
    "main",
    "run_synthetic",
]
