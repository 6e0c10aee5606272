"""The earlier study of the conditioning idea (SPEC Part B): synthetic federations and the EMNIST study.

- `generator`: clustered linear / logistic regression federations (cluster = covariance direction);
- `statistic`: the conditioning statistic, each client's first n_c sign-fixed PCA eigenvectors;
- `models`: conditional linear, ensemble, MLP, and the global / cluster / client references;
- `study`: `run_synthetic(task, clusters, seed)` -> the table of the six models; `main()`;
- `registry`: the named experiments (`MCDC/linreg/3clusters`, `MCDC/emnist/nc=1`, ...).
The EMNIST half lives in `fedcond.emnist_study`.
"""

from .generator import TASKS, SyntheticFederation, generate
from .models import MODELS, TrainConfig
from .registry import EXPERIMENTS, StudyExperiment, record
from .statistic import client_statistics, eigvec_statistic, fix_sign, leading_eigenvectors
from .study import StudyResult, fit_and_score, format_table, main, run_synthetic

__all__ = ["EXPERIMENTS", "MODELS", "StudyExperiment", "record", "TASKS", "StudyResult", "SyntheticFederation", "TrainConfig", "client_statistics",
           "eigvec_statistic", "fit_and_score", "fix_sign", "format_table", "generate", "leading_eigenvectors",
           "main", "run_synthetic"]
