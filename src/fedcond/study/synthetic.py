"""The synthetic half of the earlier study (SPEC Part B): six models on a generated federation.

`run_synthetic(task, clusters, seed)` generates the federation (`generator.generate`), computes
every client's eigenvector statistic from its training split (`statistic`), trains the six models
of `models` on the training splits and evaluates each on every client's own test split. The metric
is RMSE for linreg (lower is better) and accuracy for logreg; a result's `value` is the mean over
clients (every client counts once), `spread` the standard deviation over clients, `pooled` the
metric over all test samples together. `main()` prints the 3- and 8-cluster tables of both tasks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from fedcond.errors import FedcondError

from . import models as M
from .generator import SyntheticFederation, generate
from .statistic import client_statistics, cluster_ari


@dataclass(frozen=True)
class StudyResult:
    """One method's outcome on one federation. Has the attributes `results.save_run` reads
    (`accuracy` etc. are aliases; for a regression they hold the RMSE, and extra['metric'] says so)."""

    method: str
    metric: str  # "rmse" (lower is better) | "accuracy"
    value: float  # mean over clients
    spread: float  # std over clients
    pooled: float  # over all test samples
    per_client: list[float]
    seconds: float
    steps: int  # optimiser steps (synthetic) or epochs (EMNIST)
    hyperparameters: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    accuracy = property(lambda self: self.value)
    accuracy_std = property(lambda self: self.spread)
    weighted_accuracy = property(lambda self: self.pooled)
    rounds = property(lambda self: self.steps)


def _result(method, metric, per_client: np.ndarray, pooled, seconds, steps, hyper, extra) -> StudyResult:
    return StudyResult(
        method=method,
        metric=metric,
        value=float(per_client.mean()),
        spread=float(per_client.std()),
        pooled=float(pooled),
        per_client=[float(v) for v in per_client],
        seconds=float(seconds),
        steps=int(steps),
        hyperparameters=hyper,
        extra={"metric": metric, **extra},
    )


def fit_and_score(
    fed: SyntheticFederation,
    methods: tuple[str, ...] = tuple(M.MODELS),
    n_c: int = 1,
    config: M.TrainConfig = M.TrainConfig(),
    seed: int = 0,
    mu: np.ndarray | None = None,
) -> dict[str, StudyResult]:
    """Train and evaluate `methods` on `fed`. `mu` [N, P] overrides the eigenvector statistic
    (tests plant their own); by default it is the first n_c eigenvectors of each client's training x."""
    unknown = [m for m in methods if m not in M.MODELS]
    if unknown:
        raise FedcondError(f"unknown synthetic method(s) {', '.join(unknown)}; choose from {', '.join(M.MODELS)}")
    stats = client_statistics(fed.x_train, n_c) if mu is None else np.asarray(mu, dtype=np.float64)
    ari = cluster_ari(stats, fed.cluster, seed) if fed.num_clusters > 1 else 1.0
    t = lambda a: torch.as_tensor(a, dtype=M.DTYPE)  # noqa: E731
    x_tr, y_tr, x_te, y_te, mu_t = t(fed.x_train), t(fed.y_train), t(fed.x_test), t(fed.y_test), t(stats)
    cluster = torch.as_tensor(fed.cluster, dtype=torch.int64)
    shapes = M.Shapes(fed.num_clients, fed.num_clusters, fed.features, stats.shape[1])
    metric = "rmse" if fed.task == "linreg" else "accuracy"
    out = {}
    for name in methods:
        start = time.perf_counter()
        key = seed * 1000 + list(M.MODELS).index(name)  # a method's draws do not depend on which others run
        model = M.build(name, shapes, config, key)
        train_loss = M.train(model, fed.task, x_tr, y_tr, mu_t, cluster, config, key)
        per_client, pooled = M.scores(fed.task, M.predict(model, x_te, mu_t, cluster), y_te)
        hyper = {**config.as_dict(), "n_c": n_c, "optimizer": "adam", "schedule": "cosine"}
        if name in ("global", "cluster", "client", "conditional_linear"):
            hyper = {k: v for k, v in hyper.items() if k not in ("heads", "hidden")}
        out[name] = _result(
            name,
            metric,
            per_client,
            pooled,
            time.perf_counter() - start,
            config.steps,
            hyper,
            {"train_loss": train_loss, "statistic_ari": ari, "parameters": sum(p.numel() for p in model.parameters())},
        )
    return out


BAYES = "bayes"  # the true model's score: not trained, the floor (RMSE) / ceiling (accuracy)
METHODS = (*M.MODELS, BAYES)


def run_synthetic(
    task: str,
    clusters: int,
    seed: int = 0,
    methods: tuple[str, ...] | None = None,
    n_c: int = 1,
    config: M.TrainConfig = M.TrainConfig(),
    **generator_kw,
) -> dict[str, StudyResult]:
    """The study's table for one federation: method -> result (RMSE for linreg, accuracy for logreg).

    The federation is `generate(task, clusters, seed=seed, **generator_kw)`; `methods` default to the
    six models and 'bayes', the true x^T w_k scored on the same test splits (nothing trained).
    """
    methods = tuple(methods or METHODS)
    fed = generate(task, clusters, seed=seed, **generator_kw)
    out = fit_and_score(fed, tuple(m for m in methods if m != BAYES), n_c=n_c, config=config, seed=seed)
    if BAYES in methods:
        metric = "rmse" if task == "linreg" else "accuracy"
        bayes = fed.bayes_per_client()
        pooled = np.sqrt((bayes**2).mean()) if task == "linreg" else bayes.mean()  # equal client sizes
        out[BAYES] = _result(BAYES, metric, bayes, pooled, 0.0, 0, {}, {"what": "the true model x^T w_k, not trained"})
    return {m: out[m] for m in methods}


def format_table(results: dict[str, StudyResult], title: str = "") -> str:
    """A plain-text table: method, mean over clients +- std, pooled, seconds."""
    first = next(iter(results.values()))
    head = f"{'method':<20} {first.metric + ' mean':>14} {'+- std':>8} {'pooled':>8} {'seconds':>8}"
    lines = ([title] if title else []) + [head, "-" * len(head)]
    for r in results.values():
        lines.append(f"{r.method:<20} {r.value:>14.4f} {r.spread:>8.4f} {r.pooled:>8.4f} {r.seconds:>8.1f}")
    return "\n".join(lines)


def main(seed: int = 0, config: M.TrainConfig = M.TrainConfig(), threads: int | None = 1) -> dict:
    """Print (and return) the 3- and 8-cluster tables of both tasks, with the wall time."""
    if threads:
        torch.set_num_threads(threads)
    tables, start = {}, time.perf_counter()
    for task in ("linreg", "logreg"):
        for clusters in (3, 8):
            t0 = time.perf_counter()
            res = run_synthetic(task, clusters, seed=seed, config=config)
            tables[(task, clusters)] = res
            ari = res["cluster"].extra["statistic_ari"]
            print(
                format_table(
                    res,
                    f"\n{task}, {clusters} clusters x 100 clients, seed {seed} "
                    f"(statistic k-means ARI {ari:.3f}; {time.perf_counter() - t0:.0f} s)",
                ),
                flush=True,
            )
    print(f"\ntotal {time.perf_counter() - start:.0f} s on {torch.get_num_threads()} thread(s)")
    return tables


if __name__ == "__main__":
    main()
