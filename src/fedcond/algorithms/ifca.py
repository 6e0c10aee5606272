"""IFCA, the Iterative Federated Clustering Algorithm (Ghosh, Chung, Yin and Ramchandran, "An
Efficient Framework for Clustered Federated Learning", NeurIPS 2020), model-averaging version.

K cluster models theta_1..theta_K, each from its own seeded random initialisation (no restarts);
K is given (the true number of clusters), the clients' clusters are not. Round r:
  1. cluster estimation: client i computes the mean training loss F_i(theta_k) of every cluster
     model on its own training data and picks c_i = argmin_k F_i(theta_k) (ties: lowest k);
  2. local update: `local_epochs` of SGD from theta_{c_i} on client i's data (fresh momentum, the
     batch seeds of FedAvg);
  3. aggregation: theta_k = sum_{i: c_i = k} n_i theta_i' / sum_{i: c_i = k} n_i; a cluster model
     that no client picked keeps its weights.
Client i predicts with theta_{c_i}.

When the clusters are re-estimated: the paper's Appendix K-A says "In each communication round,
each client evaluates the training loss under each of the K cluster models (E-step)"; its section
IV-D says "5 rounds of cluster refinement". The default follows the appendix's per-round
description and IFCA's Algorithm 1: `refine_rounds=None` re-estimates in every round.
`refine_rounds=5` is the other reading: rounds 0..4 re-estimate, then the assignment is frozen
and the remaining rounds are FedAvg within each estimated cluster. At the paper protocol the two
gave the same accuracy and ARI 1.0 on the probe configurations (E1 MNIST K=2 super sparse .9504;
E3b MNIST K=2 rich .9891; docs/choices.md). With K = 1 IFCA is FedAvg, bit for bit.

`first_assignment` is a reading probed for the paper's collapse at many clients (issue 40):
"loss" (the default, Algorithm 1 from round 0) or "random": round 0's assignment is drawn
uniformly at random (seeded), the E-step above runs from round 1. From random draws the clients
of one true cluster pick the same model by loss at once (their data agree); from a random split
each model trains on a near-even mix of every cluster, the more even the more clients there are,
so the models start alike and may never part: IFCA then scores what FedAvg does. "zero": every
client trains cluster model 0 in round 0 (an assignment initialised to zeros, as an implementation
that runs the E-step after the round's update has it), the E-step from round 1. Model 0 is then one
FedAvg round ahead of the others, untrained; a client leaves it only where that round's average
fits its data worse than an untrained model does.

`weight_init` (issue 40) draws the K models as Keras would ("glorot": Glorot-uniform weights, zero
biases; `algorithms/weight_init.py`) instead of PyTorch's layer defaults ("torch", the default). The
first E-step compares untrained models, so how far apart their outputs start decides how much a
client's data, rather than the draw, picks its model.

The final assignment is in `State.clusters`; the simulator scores it against the true
clusters with `simulate.ari`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import FedcondError
from .base import Algorithm, Context, State, aggregate, receive, send
from .weight_init import check_weight_init, draw_weights


FIRST_DRAW = 0x1FCA  # purpose of the random stream of first_assignment="random"
FIRST_ASSIGNMENTS = ("loss", "random", "zero")


@dataclass(frozen=True)
class IFCA(Algorithm):
    k: int = 2  # K, the number of cluster models: pass the true number of clusters
    refine_rounds: int | None = None  # None: every round re-estimates the clusters; R: rounds 0..R-1 only
    first_assignment: str = "loss"  # round 0: by loss (Algorithm 1), "random" (a seeded uniform draw) or "zero"
    weight_init: str = "torch"  # how the K models are drawn: torch (layer defaults) or glorot (Keras's)

    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True
    counts_traffic: ClassVar[bool] = True
    num_clusters_field: ClassVar[str] = "k"  # the runner fills it with the true K unless given

    def __post_init__(self):
        if self.k < 1:
            raise FedcondError(f"IFCA needs k >= 1 cluster models, got {self.k}")
        if self.refine_rounds is not None and self.refine_rounds < 1:
            raise FedcondError(f"IFCA's refine_rounds must be None or >= 1, got {self.refine_rounds}")
        if self.first_assignment not in FIRST_ASSIGNMENTS:
            raise FedcondError(
                f"IFCA's first_assignment must be one of {', '.join(FIRST_ASSIGNMENTS)}, got {self.first_assignment!r}"
            )
        check_weight_init("IFCA's", self.weight_init)

    def plain_jobs(self) -> bool:
        return True

    def init(self, ctx: Context) -> State:
        models = tuple(  # distinct draws
            draw_weights(ctx.init_params(self.conditioned, index), self.weight_init, ctx.seed, index)
            for index in range(self.k)
        )
        return State(models=models, assignment=(0,) * ctx.federation.num_clients)

    def estimates_in(self, r: int) -> bool:
        return self.refine_rounds is None or r < self.refine_rounds

    def choose(self, ctx: Context, models: tuple) -> tuple[tuple[int, ...], np.ndarray]:
        """Each client's lowest-loss cluster model, and the losses [N, K] it compared."""
        n = ctx.federation.num_clients
        items = []
        for i in range(n):
            x, y, s = ctx.pooled((i,), self.conditioned)
            items += [(theta, x, y, s) for theta in models]
        losses = np.asarray(ctx.engine.losses(ctx.spec(self.conditioned), items)).reshape(n, len(models))  # [N, K]
        if ctx.traffic is not None:  # every cluster model goes to every client, which evaluates each on its data
            for i in range(n):
                ctx.traffic.send(i, models)
                ctx.traffic.forwarded(i, len(models) * ctx.federation.clients[i].n_train)
        return tuple(int(c) for c in np.argmin(losses, axis=1)), losses

    def first_draw(self, ctx: Context, n: int) -> tuple[int, ...]:
        """Round 0's assignment where it is not by loss: every client on model 0, or a seeded uniform draw."""
        if self.first_assignment == "zero":
            return (0,) * n
        rng = np.random.default_rng(np.random.SeedSequence([ctx.seed, FIRST_DRAW]))
        return tuple(int(c) for c in rng.integers(0, self.k, size=n))

    def round(self, ctx: Context, state: State, r: int) -> State:
        n = ctx.federation.num_clients
        drawn = r == 0 and self.first_assignment != "loss"
        if drawn:
            choice = self.first_draw(ctx, n)
        elif self.estimates_in(r):
            choice, _ = self.choose(ctx, state.models)
        else:
            choice = state.clusters
        jobs = [ctx.job(state.models[choice[i]], (i,), self.conditioned, seed=(r, i)) for i in range(n)]
        if drawn or not self.estimates_in(r):  # no estimate this round: only the client's own cluster model goes out
            send(ctx, range(n), lambda i: state.models[choice[i]])
        results = ctx.engine.train(ctx.spec(self.conditioned), jobs)
        receive(ctx, range(n), results)
        models = list(state.models)
        for k in range(self.k):
            members = [i for i in range(n) if choice[i] == k]
            cluster = aggregate(
                ctx, members, [results[i] for i in members]
            )  # without the clients that dropped out (Flower)
            if cluster.clients:
                models[k] = cluster.average()
        loss = aggregate(ctx, range(n), results).loss
        return State(
            models=tuple(models),
            assignment=choice,
            round=r + 1,
            train_loss=loss,
            clusters=choice,
            metrics={"clusters_used": len(set(choice)), "last_reassignment": self.last_reassignment(state, choice, r)},
        )

    @staticmethod
    def last_reassignment(state: State, choice: tuple[int, ...], r: int) -> int | None:
        """The last round (0-based) whose assignment differs from the round before's; round 0 sets the first.
        A run whose value is below refine_rounds ran exactly as it would have with the clusters frozen there.
        None: unknown (resumed from a checkpoint written before this was kept, and unchanged since)."""
        if r == 0 or choice != state.assignment:
            return r
        last = state.metrics.get("last_reassignment")
        return None if last is None else int(last)  # type: ignore[call-overload]
