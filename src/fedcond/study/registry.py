"""The earlier study's named experiments (SPEC Part B), for sweeps and reports.

Names: `MCDC/linreg/3clusters`, `MCDC/linreg/8clusters`, `MCDC/logreg/3clusters`,
`MCDC/logreg/8clusters` (the six synthetic models and 'bayes', the true model), `MCDC/emnist/references`
(global, cluster, client) and `MCDC/emnist/nc=<n_c>` for n_c in 1, 2, 3, 4, 8 (the conditioned CNN;
the references do not depend on n_c, so they run once, under their own name).

Each entry is a `StudyExperiment`: calling it runs the experiment and returns method -> StudyResult,
whose attributes are the ones `fedcond.results.save_run` reads; `record` writes them. Two protocol
presets: `paper` (the study's settings) and `smoke` (tiny, for CI: numbers not meaningful).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedcond.errors import FedcondError

from .emnist import CLUSTERS, SPLIT, EmnistConfig, run_emnist
from .models import TrainConfig
from .synthetic import METHODS as SYNTHETIC_METHODS
from .synthetic import StudyResult, run_synthetic

FAMILY = "MCDC"


EMNIST_PRESETS = {
    "paper": EmnistConfig(),
    "smoke": EmnistConfig(clients_per_cluster=2, samples_per_client=250, test_samples_per_client=100, epochs=1),
}
SYNTHETIC_PRESETS = {"paper": TrainConfig(), "smoke": TrainConfig(steps=200)}
PROTOCOL_NAMES = tuple(SYNTHETIC_PRESETS)


@dataclass(frozen=True)
class StudyExperiment:
    name: str
    dataset: str  # "synthetic_linreg" | "synthetic_logreg" | "emnist"
    task: str  # "linreg" | "logreg" | "emnist"
    clusters: int
    methods: tuple[str, ...]  # what a call runs by default (and a sweep's cells)
    n_c: int | None = None  # EMNIST conditional only
    family: str = FAMILY

    def protocol(self, protocol: str = "paper"):
        """The preset's configuration object (TrainConfig or EmnistConfig)."""
        presets = SYNTHETIC_PRESETS if self.task != "emnist" else EMNIST_PRESETS
        if protocol not in presets:
            raise FedcondError(f"unknown protocol '{protocol}' for {self.name}; choose {', '.join(presets)}")
        return presets[protocol]

    def scenario(self) -> dict:
        """The scenario description stored with every result row."""
        out = {"family": self.family, "task": self.task, "clusters": self.clusters}
        if self.task == "emnist":
            out.update(split=SPLIT, cluster_names=list(CLUSTERS))
        else:
            out.update(clients_per_cluster=100, features=10)
        return out if self.n_c is None else {**out, "n_c": self.n_c}

    def __call__(
        self,
        seed: int = 0,
        protocol: str = "paper",
        methods: tuple[str, ...] | None = None,
        data_dir=None,
        device: str = "cpu",
        **overrides,
    ) -> dict[str, StudyResult]:
        """Run it. `overrides` replace fields of the preset's config (e.g. steps=500, epochs=2)."""
        methods = tuple(methods or self.methods)
        config = replace(self.protocol(protocol), **overrides) if overrides else self.protocol(protocol)
        if self.task != "emnist":
            return run_synthetic(self.task, self.clusters, seed=seed, methods=methods, config=config)
        if self.n_c is None:
            return run_emnist(data_dir, nc=(), methods=methods, seed=seed, config=config, device=device)
        res = run_emnist(data_dir, nc=(self.n_c,), methods=methods, seed=seed, config=config, device=device)
        return {("conditional" if k.startswith("conditional/") else k): v for k, v in res.items()}


def _build() -> dict[str, StudyExperiment]:
    out = {}
    for task in ("linreg", "logreg"):
        for k in (3, 8):
            out[f"{FAMILY}/{task}/{k}clusters"] = StudyExperiment(
                f"{FAMILY}/{task}/{k}clusters", f"synthetic_{task}", task, k, SYNTHETIC_METHODS
            )
    out[f"{FAMILY}/emnist/references"] = StudyExperiment(
        f"{FAMILY}/emnist/references", "emnist", "emnist", 3, ("global", "cluster", "client")
    )
    for n_c in (1, 2, 3, 4, 8):
        out[f"{FAMILY}/emnist/nc={n_c}"] = StudyExperiment(
            f"{FAMILY}/emnist/nc={n_c}", "emnist", "emnist", 3, ("conditional",), n_c=n_c
        )
    return out


EXPERIMENTS: dict[str, StudyExperiment] = _build()


def record(
    con,
    experiment: StudyExperiment,
    results: dict[str, StudyResult],
    seed: int,
    protocol: str = "paper",
    device: str = "cpu",
    config=None,
) -> list[int]:
    """Write every result as one row of the results database (`fedcond.results`); returns the row ids.
    `config`: the configuration actually run, when overrides changed the preset's.
    For regression the `accuracy` columns hold RMSE (lower is better) and `extra.metric` says 'rmse'."""
    from dataclasses import asdict

    from fedcond import results as R

    proto = asdict(config if config is not None else experiment.protocol(protocol))
    return [
        R.save_run(
            con,
            family=experiment.family,
            dataset=experiment.dataset,
            scenario=experiment.scenario(),
            method=method,
            seed=seed,
            protocol=proto,
            result=r,
            experiment=experiment.name,
            protocol_name=protocol,
            device=device,
        )
        for method, r in results.items()
    ]
