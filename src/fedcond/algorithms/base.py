"""What every algorithm shares: the context it runs in and the state it returns.

An algorithm is a frozen dataclass of its hyper-parameters (it prints, hashes and sweeps for
free). Learned things live in the `State` it returns from `init` and `round`; it never keeps
them on `self`. A round is broadcast -> local update (through the engine) -> aggregate.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Protocol

import numpy as np
import torch

from ..engine import Engine, Job, JobResult, Params, SGDConfig, clone_params, weighted_average
from ..errors import FedcondError
from ..models import ModelSpec
from ..scenarios import Federation, GroundTruth
from .traffic import Traffic


@dataclass(frozen=True)
class Context:
    """Everything an algorithm may read. `truth` is None unless the algorithm is an oracle."""

    federation: Federation
    plain_model: ModelSpec  # the baselines' backbone
    conditioned_model: ModelSpec | None  # the same backbone taking s (None: no statistics in this run)
    engine: Engine
    seed: int
    local_epochs: int = 1
    rounds: int = 1  # total rounds of this run (FedProc's loss schedule needs T)
    stats: torch.Tensor | None = None  # float32 [N, L] normalised client statistics
    truth: GroundTruth | None = None
    # A plug-in's hooks (set by a wrapper such as JDFL's; None: cross-entropy on the C classes, fresh draws):
    loss_hook: Callable[[tuple[int, ...], tuple[int, ...]], Callable] | None = (
        None  # (members, seed) -> (logits, y, x) -> loss
    )
    scores: Callable[[torch.Tensor], torch.Tensor] | None = None  # the model's outputs -> class scores, at prediction
    initial_params: Params | None = None  # every model starts from these; None: drawn
    traffic: Traffic | None = None  # what each client sends, receives and computes (traffic.py); None: not counted
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def sgd(self) -> SGDConfig:
        return self.engine.sgd

    def init_params(self, conditioned: bool, index: int = 0) -> Params:
        """Fresh weights, drawn from a stream named by (seed, purpose 'init', model index)."""
        if self.initial_params is not None:
            return clone_params(self.initial_params)
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(int(np.random.SeedSequence([self.seed, 0x1417, index]).generate_state(1)[0]))
        params = clone_params(self.spec(conditioned).build().state_dict())
        torch.random.set_rng_state(gen_state)
        return params

    def spec(self, conditioned: bool) -> ModelSpec:
        return self.conditioned_model if conditioned else self.plain_model

    def client_stats(self, i: int, n: int) -> torch.Tensor:
        return self.stats[i].expand(n, -1)  # [n, L]

    def pooled(self, members: tuple[int, ...], conditioned: bool):
        """Concatenated training data of some clients (and each sample's own client statistics)."""
        key = ("pool", members, conditioned)
        if key not in self._cache:
            cs = [self.federation.clients[i] for i in members]
            if len(members) == 1:  # a single client's own tensors, no copy
                x, y = cs[0].x_train, cs[0].y_train
            else:
                x = torch.cat([c.x_train for c in cs])  # [n, C, H, W]
                y = torch.cat([c.y_train for c in cs])  # [n]
            s = (
                torch.cat([self.client_stats(i, c.n_train) for i, c in zip(members, cs)]) if conditioned else None
            )  # [n, L]
            self._cache[key] = (x, y, s)
        return self._cache[key]

    def classification_loss(self, members: tuple[int, ...], seed: tuple[int, ...]):
        """(logits, y, x) -> loss for a job of `members` (the loss hook's), or None for plain cross-entropy.
        Algorithms that write their own loss_fn (FedProc) use it for their classification term, so a
        plug-in changes the head's supervision without touching the algorithm."""
        return None if self.loss_hook is None else self.loss_hook(members, (self.seed, *seed))

    def job(self, params: Params, members: tuple[int, ...], conditioned: bool, seed: tuple[int, ...], **kw) -> Job:
        x, y, s = self.pooled(members, conditioned)
        if kw.get("loss_fn") is None and self.loss_hook is not None:
            kw["loss_fn"] = HeadLoss(self.classification_loss(members, seed))
        epochs = kw.pop("epochs", self.local_epochs)
        if self.traffic is not None:
            self._count(members, conditioned, len(y) * epochs)
        return Job(params=params, x=x, y=y, s=s, epochs=epochs, seed=(self.seed, *seed), **kw)

    def _count(self, members: tuple[int, ...], conditioned: bool, samples: int) -> None:
        """One client's job is its compute; a job on several clients' data is the server's, on data
        they sent it (traffic.py)."""
        assert self.traffic is not None
        if len(members) == 1:
            self.traffic.train(members[0], samples)
            return
        for i in members:
            c = self.federation.clients[i]
            self.traffic.pooled_data(i, (c.x_train, c.y_train, self.stats[i] if conditioned else None))


@dataclass(frozen=True, eq=False)  # holds a loss: compared by identity
class HeadLoss:
    """(model, x, s, y) -> loss: the engine's loss_fn for a classifier whose logits go to `targets`,
    a (logits, y, x) -> loss criterion (a loss hook's, such as JDFL's joint labels)."""

    targets: Callable

    def __call__(self, model, x, s, y):
        return self.targets(model(x, s), y, x)


@dataclass(frozen=True)
class State:
    """Learned state after a round. `assignment[i]` is the model that client i predicts with.

    The simulator reads the typed fields; `extra` is the algorithm's own (control variates,
    prototypes, priors), read by nobody else."""

    models: tuple[Params, ...]
    assignment: tuple[int, ...]
    momentum: tuple[Params | None, ...] = ()  # optimiser state carried across rounds, per model
    round: int = 0
    train_loss: float = float("nan")
    metrics: dict[str, object] = field(default_factory=dict)  # reported with the result (Ditto's global-track loss)
    alternates: dict[str, int] = field(
        default_factory=dict
    )  # name -> another model evaluated on every client (FedDyn's)
    clusters: tuple[int, ...] | None = None  # the method's estimate of each client's cluster, scored by ARI (IFCA's)
    extra: dict = field(default_factory=dict)  # the algorithm's own learned state


class Algorithm(Protocol):
    """What the simulator and the Flower server call. Algorithms subclass it (for the defaults) and
    are frozen dataclasses of their hyper-parameters."""

    conditioned: ClassVar[bool]  # does the model take the client statistics?
    # does round() record what crosses the wire (ctx.traffic, traffic.py)? False: a row says "not measured"
    counts_traffic: ClassVar[bool] = False
    needs_truth: ClassVar[bool]  # may it see the true clusters (oracles only)?
    federated: ClassVar[bool]  # rounds of local_epochs (True) or one epoch of pooled training per round

    def init(self, ctx: Context) -> State: ...

    def round(self, ctx: Context, state: State, r: int) -> State: ...

    def plain_jobs(self) -> bool:
        """Is every local job it sends `Job.plain` (what DP-SGD can privatise)? Said per class, so that
        `fedcond flower` refuses a private run up front; tests/algorithms/test_plain_jobs.py checks each
        answer against the jobs two rounds send."""
        return False

    def evaluation_context(self, ctx: Context, state: State) -> Context:
        """The context to evaluate `state` in; by default the training one (JDFL's: its expanded head)."""
        return ctx

    def serve_newcomer(self, ctx: Context, state: State, client, client_id: int) -> Params | None:
        """The parameters a client unseen in training is evaluated with, by the method's own protocol
        (fine-tuning, a hypernetwork's embedding); None (the default): one of the trained models,
        chosen by the simulator (holdout.newcomer_model)."""
        return None


@dataclass(frozen=True)
class Replies:
    """One round's replies, gathered: the clients that answered (in job order), their results and sizes."""

    clients: tuple[int, ...]
    results: tuple[JobResult, ...]
    sizes: np.ndarray  # [P] n_i, the training samples of each replying client

    def average(self, uniform: bool = False) -> Params:
        """sum_i n_i theta_i / sum_i n_i over the replies; uniform: the plain mean (FedDyn's, FedDC's)."""
        return weighted_average(
            [res.params for res in self.results], np.ones(len(self.results)) if uniform else self.sizes
        )

    @property
    def loss(self) -> float:
        """The replies' training loss, weighted by client size: what a round reports."""
        return float(np.average([res.mean_loss for res in self.results], weights=self.sizes))


def aggregate(ctx: Context, clients, results: list[JobResult | None]) -> Replies:
    """The replies to one job per client of `clients`, for averaging and the reported loss. None is
    a client that did not reply (over Flower it dropped out mid-round; in-process every client
    replies): it is left out, as a client that did not take part in the round."""
    ok = [j for j, res in enumerate(results) if res is not None]
    answered = tuple(clients[j] for j in ok)
    return Replies(answered, tuple(results[j] for j in ok), ctx.federation.sizes()[list(answered)])


def carried_momentum(before: tuple, results: list[JobResult | None]) -> tuple:
    """Each client's momentum buffers after a round whose jobs carried them: the job's, or, for a
    client that did not reply (over Flower it dropped out), the buffers it held before the round."""
    return tuple(old if res is None else res.momentum for old, res in zip(before, results))


def send(ctx: Context, clients, payload) -> None:
    """The server gives each of `clients` the payload (payload(i) when callable): counted in ctx.traffic."""
    if ctx.traffic is not None:
        for i in clients:
            ctx.traffic.send(i, payload(i) if callable(payload) else payload)


def receive(ctx: Context, clients, results: list[JobResult | None], keep=None) -> None:
    """Each of `clients` sends back its job's weights (only the names in `keep`, where given) and the
    momentum buffers its job kept (a client holds no state between rounds, so carried buffers travel
    with its reply; a client that did not reply sends nothing): counted in ctx.traffic."""
    if ctx.traffic is not None:
        for i, res in zip(clients, results):
            if res is not None:
                ctx.traffic.receive(i, res.params if keep is None else {k: res.params[k] for k in keep})
                ctx.traffic.receive(i, res.momentum)  # None (0 bytes) unless the job kept its buffers


_CLIENT_SAMPLING = 0xC11E  # names the random stream of client sampling (shared by every algorithm here)


def participants(ctx: Context, r: int, fraction: float) -> tuple[int, ...]:
    """The clients that train in round r: all of them, or round(fraction * N) (at least one) drawn
    without replacement from a stream named by (seed, 'client sampling', r), so every algorithm
    with the same fraction sees the same draws."""
    n = ctx.federation.num_clients
    if fraction >= 1.0:
        return tuple(range(n))
    m = max(1, int(round(fraction * n)))
    rng = np.random.default_rng(np.random.SeedSequence([ctx.seed, _CLIENT_SAMPLING, r]))
    return tuple(sorted(int(i) for i in rng.choice(n, size=m, replace=False)))


@functools.lru_cache(maxsize=None)
def parameter_names(spec) -> tuple[str, ...]:
    """Names of the model's trainable parameters (the state_dict keys that get correction terms;
    the rest are buffers such as batch-norm statistics)."""
    with torch.random.fork_rng(devices=[]):  # building draws initial weights; keep the caller's stream untouched
        return tuple(name for name, _ in spec.build().named_parameters())


def check_participation(fraction: float) -> None:
    if not 0.0 < fraction <= 1.0:
        raise FedcondError(f"participation must be in (0, 1], got {fraction}")


def hyperparameters(alg) -> dict:
    """The algorithm's hyper-parameters as a plain dict (what the results database stores)."""
    return dataclasses.asdict(alg)
