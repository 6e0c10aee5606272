"""The round loop: prepare a run (hold-out, client statistics, context), run its rounds (`run_rounds`, which
the Flower server runs too), evaluate per client and summarise."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from . import stats as S
from .algorithms import Algorithm, Context, State, hyperparameters, make_algorithm
from .algorithms.traffic import Traffic
from .checkpoint import Checkpoint
from .client_stats import client_statistics
from .engine import Engine, SGDConfig, make_engine, predict
from .errors import FedcondError
from .holdout import Unseen, evaluate_unseen, hold_out, unseen_statistics
from .models import ModelSpec
from .plugin_loading import plugins_record
from .protocol import Protocol, conditioning_of, input_normalisation
from .results import pack_hits
from .scenarios import Scenario


@dataclass
class MethodResult:
    method: str
    accuracy: float  # mean over clients (unweighted: every client counts once)
    accuracy_std: float  # spread over clients
    weighted_accuracy: float  # over all test samples (clients weighted by n_test)
    per_client: list[float]
    seconds: float
    train_loss: float
    rounds: int
    hyperparameters: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


def sample_hits(ctx: Context, state: State, conditioned: bool) -> list[np.ndarray]:
    """Per client, whether each of its test samples is predicted right, with the model the algorithm
    assigns it (read through the context's `scores`: JDFL's expanded head collapsed to the C classes)."""
    model = ctx.spec(conditioned).build()
    hits = []
    for i, c in enumerate(ctx.federation.clients):
        s = ctx.client_stats(i, c.n_test) if conditioned else None
        pred = predict(model, state.models[state.assignment[i]], c.x_test, s, scores=ctx.scores)
        hits.append((pred == c.y_test).numpy().astype(bool))
    return hits


def accuracies(hits: list[np.ndarray]) -> tuple[list[float], float]:
    """(accuracy of every client, accuracy over all test samples)."""
    right = [int(h.sum()) for h in hits]
    per_client = [r / max(1, h.size) for r, h in zip(right, hits)]
    return per_client, sum(right) / max(1, sum(h.size for h in hits))


def evaluate(ctx: Context, state: State, conditioned: bool) -> tuple[list[float], float]:
    """Accuracy of every client on its own test set, and over all test samples (sample_hits)."""
    return accuracies(sample_hits(ctx, state, conditioned))


def cluster_accuracy(scenario: Scenario, per_client: list[float]) -> dict[str, float]:
    """Accuracy over all test samples of each true cluster's clients (JDFL's per-domain accuracy)."""
    fed, truth = scenario.federation, scenario.truth
    out = {}
    for k, name in enumerate(truth.cluster_names):
        members = [i for i in range(fed.num_clients) if truth.cluster[i] == k]
        n = sum(fed.clients[i].n_test for i in members)
        hits = sum(per_client[i] * fed.clients[i].n_test for i in members)
        out[name] = float(hits / n) if n else float("nan")
    return out


def ari(assignment, truth_cluster) -> float:
    """Adjusted Rand index of an estimated clustering against the true one (1.0: equal up to relabelling)."""
    from sklearn.metrics import adjusted_rand_score

    return float(adjusted_rand_score(np.asarray(truth_cluster), np.asarray(assignment)))


def make_context(
    scenario: Scenario,
    alg: Algorithm,
    protocol: Protocol,
    seed: int = 0,
    engine: Engine | None = None,
    stats: torch.Tensor | None = None,
    data_dir=None,
) -> Context:
    """What `alg` may see of `scenario`: the clients' data, the model specs, the engine; the
    statistics only if it is conditioned, the true clusters only if it is an oracle."""
    fed = scenario.federation
    if alg.conditioned and stats is None:
        stats = client_statistics(scenario, protocol, data_dir, seed)[1]
    mean, std = input_normalisation(protocol, fed.mean, fed.std)
    plain = ModelSpec(fed.input_shape, fed.num_classes, 0, protocol.conditioning, mean, std, protocol.model)
    return Context(
        federation=fed,
        plain_model=plain,
        conditioned_model=(
            dataclasses.replace(
                plain,
                stat_dim=S.statistic_dim(protocol.statistic, protocol.num_eigenvalues, fed.num_classes),
                conditioning=conditioning_of(alg, protocol),
            )
            if alg.conditioned
            else None
        ),
        engine=engine or make_engine(SGDConfig.of(protocol)),
        seed=seed,
        local_epochs=protocol.local_epochs if alg.federated else 1,
        rounds=protocol.rounds if alg.federated else protocol.epochs,
        stats=stats if alg.conditioned else None,
        truth=scenario.truth if alg.needs_truth else None,
        traffic=Traffic(fed.num_clients),
    )


@dataclass
class PreparedRun:
    """A run ready for its first round: the algorithm, the scenario it trains on (newcomers held
    out), its context, and what evaluating the newcomers needs."""

    name: str
    alg: Algorithm
    scenario: Scenario
    ctx: Context
    unseen: Unseen | None = None
    train_raw: np.ndarray | None = None  # the training clients' raw statistics (a newcomer is normalised with them)


def prepare_run(
    scenario: Scenario,
    method: "str | Algorithm",
    protocol: Protocol,
    seed: int = 0,
    stats: torch.Tensor | None = None,
    hyper: dict | None = None,
    engine: Engine | None = None,
    data_dir=None,
) -> PreparedRun:
    """Everything before the first round: the algorithm, the hold-out, the statistics, the context."""
    truth = scenario.truth
    if isinstance(method, str):  # no true clusters: a clustered method keeps its own default K unless named
        alg = make_algorithm(method, num_clusters=truth.num_clusters if truth.known else None, **(hyper or {}))
    else:
        alg = method
    if alg.needs_truth and not truth.known:
        raise FedcondError(
            f"{method if isinstance(method, str) else type(alg).__name__} needs the true clusters, and a "
            f"{scenario.federation.family} federation has none; leave it out of --methods"
        )
    name = method if isinstance(method, str) else type(alg).__name__
    unseen = None
    if protocol.holdout_clients:  # newcomers: out of training, evaluated at the end (holdout.py)
        scenario, unseen = hold_out(scenario, protocol.holdout_clients)
        stats = None  # the training population's own statistics
    train_raw = None
    if alg.conditioned and stats is None:  # held out: the training clients keep their ids in the full scenario
        train_raw, stats = client_statistics(scenario, protocol, data_dir, seed, ids=unseen.kept if unseen else None)
    ctx = make_context(scenario, alg, protocol, seed, engine, stats, data_dir)
    return PreparedRun(name, alg, scenario, ctx, unseen, train_raw)


def run_rounds(
    alg: Algorithm,
    ctx: Context,
    state: State,
    rounds: range,
    name: str,
    before: Callable[[int], None] | None = None,
    after: Callable[[int, State], None] | None = None,
) -> State:
    """The round loop, the simulator's and the Flower server's: round r for r in `rounds`, a stop
    at the first training loss that is not finite, then `after(r, state)` (the caller's evaluation,
    checkpoint, progress). `before(r)`: what the caller does as the round starts (Flower names
    the round's messages)."""
    for r in rounds:
        if before is not None:
            before(r)
        state = alg.round(ctx, state, r)
        if not np.isfinite(state.train_loss):
            raise FedcondError(f"{name} diverged in round {r + 1} (training loss {state.train_loss})")
        if after is not None:
            after(r, state)
    return state


def run_method(
    scenario: Scenario,
    method: "str | Algorithm",
    protocol: Protocol,
    seed: int = 0,
    on_round: Callable[[int, State], None] | None = None,
    stats: torch.Tensor | None = None,
    hyper: dict | None = None,
    engine: Engine | None = None,
    data_dir=None,
    checkpoint: "Checkpoint | None" = None,
    on_metrics: Callable[[int, dict], None] | None = None,
) -> MethodResult:
    """Train one method on one scenario for protocol.epochs passes; evaluate on local test sets.

    `engine` defaults to the in-process loop; pass a PoolEngine to spread clients over processes.
    `checkpoint` (fedcond.checkpoint): resume from its saved rounds, and save progress there as
    training goes; the caller removes it once the result is recorded.
    `on_metrics(round, metrics)`: after every round (1-based), its metrics (round_metrics), for trackers.
    """
    start, process_start = time.perf_counter(), time.process_time()
    run = prepare_run(scenario, method, protocol, seed, stats, hyper, engine, data_dir)
    alg, ctx = run.alg, run.ctx
    cpu = CpuClock(ctx.engine, process_start)
    rounds = ctx.rounds  # federated: epochs / local_epochs rounds; pooled: one epoch per round
    resumed = checkpoint.load() if checkpoint is not None else None
    if resumed is not None:  # every random stream is named by (seed, round, client): the rest runs as if never stopped
        first, state, curve, earlier = resumed.rounds_done, resumed.state, resumed.curve, resumed.seconds
        cpu.earlier = resumed.cpu_seconds  # None (a checkpoint from before CPU time was kept): the run's is unknown
        if ctx.traffic is not None:
            ctx.traffic.restore(resumed.traffic)
    else:
        first, state, earlier = 0, alg.init(ctx), 0.0
        # [round, mean accuracy over clients, over all test samples] every eval_every rounds and after the last
        curve = []

    def after(r: int, state: State) -> None:
        if protocol.eval_every and ((r + 1) % protocol.eval_every == 0 or r + 1 == rounds):
            pc, w = evaluate(alg.evaluation_context(ctx, state), state, alg.conditioned)
            curve.append([r + 1, float(np.mean(pc)), float(w)])
        if on_metrics is not None:
            on_metrics(r + 1, round_metrics(r, state, curve))
        if checkpoint is not None and r + 1 < rounds and checkpoint.due():
            traffic = ctx.traffic.as_saved() if ctx.traffic is not None else None
            checkpoint.save(r + 1, state, curve, earlier + time.perf_counter() - start, traffic, cpu.spent())
        if on_round is not None:
            on_round(r, state)

    try:
        state = run_rounds(alg, ctx, state, range(first, rounds), run.name, after=after)
    except FedcondError as e:  # e.g. diverged: the failed row records what ran (run.Failure)
        e.hyperparameters = hyperparameters(alg)
        raise
    per_client, weighted, extra = final_evaluation(
        run, state, curve, protocol, data_dir, seed, resumed_after=first if resumed is not None else None
    )
    if alg.counts_traffic and ctx.traffic is not None:  # what crossed the wire, per client (algorithms/traffic.py)
        extra["traffic"] = ctx.traffic.summary(rounds)
    spent = cpu.spent()
    if spent is not None:  # core-seconds, whatever else shared the cores: what the run itself cost
        extra["cpu_seconds"] = round(spent, 2)
    return MethodResult(
        method=run.name,
        accuracy=float(np.mean(per_client)),
        accuracy_std=float(np.std(per_client)),
        weighted_accuracy=weighted,
        per_client=per_client,
        seconds=earlier + time.perf_counter() - start,
        train_loss=state.train_loss,
        rounds=rounds,
        hyperparameters=hyperparameters(alg),
        extra=extra,
    )


class CpuClock:
    """The CPU time a run costs: this process's (every thread) since `process_start`, plus what the
    engine's worker processes report for their jobs since the clock was made (an engine shared by
    several runs counts each its own). Wall time also holds whatever else shared the cores, or a
    paused process (a row's `seconds`); this does not. None where an engine does not report its
    workers' time (`worker_cpu_seconds`) or a resumed checkpoint did not keep the time before it."""

    def __init__(self, engine, process_start: float) -> None:
        self.engine, self.process_start = engine, process_start
        self.workers_start = self._workers()
        self.earlier: float | None = 0.0  # what a checkpoint says was spent before this process took over

    def _workers(self) -> float | None:
        return getattr(self.engine, "worker_cpu_seconds", None)

    def spent(self) -> float | None:
        workers = self._workers()
        if workers is None or self.workers_start is None or self.earlier is None:
            return None
        return self.earlier + time.process_time() - self.process_start + workers - self.workers_start


def round_metrics(r: int, state: State, curve: list) -> dict[str, float]:
    """What a tracker sees of round r (0-based): the training loss, and the accuracies where the run
    evaluated this round (the curve's last point)."""
    out = {"train_loss": float(state.train_loss)}
    if curve and curve[-1][0] == r + 1:
        out.update(accuracy=curve[-1][1], weighted_accuracy=curve[-1][2])
    return out


def final_evaluation(
    run: PreparedRun,
    state: State,
    curve: list,
    protocol: Protocol,
    data_dir=None,
    seed: int = 0,
    resumed_after: int | None = None,
) -> tuple[list[float], float, dict]:
    """Accuracy of every client, over all test samples, and the result's extra: the method's own
    metrics, which test samples were right, per true cluster, the models it keeps beside the
    assigned ones, the curve's best, the newcomers' accuracy and how well it found the clusters."""
    alg, truth = run.alg, run.scenario.truth
    eval_ctx = alg.evaluation_context(run.ctx, state)
    hits = sample_hits(eval_ctx, state, alg.conditioned)
    per_client, weighted = accuracies(hits)
    extra = dict(state.metrics)
    if plugins_record():  # the plug-ins loaded where it ran: what produced the row, beside its method
        extra["plugins"] = plugins_record()
    extra["test_hits"] = pack_hits(hits)  # which test samples were right (results.unpack_hits)
    if alg.conditioned:  # the width the model took: a statistic's name does not pin it once its definition changes
        extra["statistic_width"] = run.ctx.spec(True).stat_dim
    if resumed_after is not None:
        extra["resumed_after_round"] = (
            resumed_after  # rounds 1..resumed_after ran in an earlier process (seconds count both)
        )
    if truth.known:  # a scenario without true clusters has no per-cluster accuracy
        extra["cluster_accuracy"] = cluster_accuracy(run.scenario, per_client)
        extra["cluster_of_client"] = [truth.cluster_names[k] for k in truth.cluster]
    for name, index in state.alternates.items():  # another model the method keeps (FedDyn's theta)
        other = dataclasses.replace(state, assignment=(index,) * len(state.assignment))
        extra[f"{name}_accuracy"] = float(np.mean(evaluate(eval_ctx, other, alg.conditioned)[0]))
    extra.update(best_of_curve(curve))
    if run.unseen is not None:
        s_new = (
            unseen_statistics(run.ctx, protocol, run.unseen, run.train_raw, data_dir, seed) if alg.conditioned else None
        )
        extra.update(evaluate_unseen(eval_ctx, alg, state, run.unseen, truth.cluster, s_new))
    if state.clusters is not None and truth.known:  # clustering methods: how well they recovered the true clusters
        extra["ari"] = ari(state.clusters, truth.cluster)
    return per_client, weighted, extra


def best_of_curve(curve: list) -> dict:
    """The curve and the first round reaching each maximum (nothing without a curve)."""
    if not curve:
        return {}
    best = max(range(len(curve)), key=lambda j: curve[j][1])
    best_w = max(range(len(curve)), key=lambda j: curve[j][2])
    return dict(
        curve=curve,
        best_round=curve[best][0],
        best_accuracy=curve[best][1],
        best_weighted_round=curve[best_w][0],
        best_weighted_accuracy=curve[best_w][2],
    )
