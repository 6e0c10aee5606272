"""DAC, decentralised adaptive clustering (Zec, Ekblom, Willbo, Mogren and Listo Zec,
"Decentralized adaptive clustering of deep nets is beneficial for client collaboration",
FL-IJCAI 2022 workshop; code: github.com/edvinli/DAC), in two versions.

Both are decentralised: every client i keeps its own model theta_i (all start from one shared,
seeded initialisation), and a round starts with the local update theta_i' = `local_epochs` of
SGD on client i's data (fresh momentum, FedAvg's batch seeds). Client i predicts with theta_i.

`DAC`, the variant the paper used (parameter similarity, deterministic):
  sim_ij = cos(theta_i', theta_j') over the flattened trainable parameters (buffers such as
  batch-norm statistics excluded); N_i = the k peers j != i of highest sim_ij (ties: lower j);
  theta_i = mean of theta_j' over {i} + N_i, uniform weights.
  k defaults to the expected cluster size minus the client itself, round(N / clusters) - 1,
  with `clusters` the true number of clusters K.

`DACLoss`, the authors' original loss-based DAC (their `train_DAC`), made synchronous: every
client reads the models and priors of the previous step, so the order of clients is immaterial
(the authors update clients one after another in random order). Client i holds priors
a_i in R^N (0: unknown peer) and sampling counts. After the local update:
  1. sampling: p_ij = softmax_{j != i}(tau * a_ij), p_ii = 0 (uniform while nothing is known);
     S_i = `n_sampled` distinct peers drawn with probabilities p_i from the stream
     (seed, SAMPLING, r), clients in index order;
  2. scoring: l_ij = mean loss of theta_j' on client i's training data, a_ij = 1 / l_ij (j in S_i);
  3. two hops: every peer j that some k in S_i knows (a_kj > 0) and that i has never sampled
     gets a_ij = a_k*j, with k* the k in S_i (knowing j) most similar to i (ties: first drawn);
  4. aggregation: theta_i = sum over {i} + S_i of w_j theta_j'. With aggregation="size" (the
     authors' code) w_j is proportional to n_j; with aggregation="softmax" w_j =
     softmax_j(tau * a_ij), with a_ii = 1 / l_ii, for the reading of "softmax weights" as
     aggregation weights. In the authors' code the tau-softmax gives the sampling probabilities.
The paper's settings: tau = 10, 5 sampled neighbours; the authors found it 4.2 pp worse than DAC.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from ..engine import Params, mix, weighted_average
from ..errors import FedcondError
from .base import aggregate, parameter_names, Algorithm, Context, State

SAMPLING = 0xDAC5  # purpose of the random stream that draws DACLoss's neighbours


def cosine_matrix(models: list[Params], names: tuple[str, ...], chunk: int = 1 << 16) -> np.ndarray:
    """Cosine similarities [N, N] of the models' flattened `names` entries, accumulated in float64
    column chunks so that N full parameter vectors are never stacked at once."""
    n = len(models)
    gram = torch.zeros(n, n, dtype=torch.float64)  # [N, N]
    for name in names:
        flat = [m[name].reshape(-1) for m in models]
        for c0 in range(0, flat[0].numel(), chunk):
            v = torch.stack([f[c0 : c0 + chunk] for f in flat]).to(torch.float64)  # [N, <=chunk]
            gram += v @ v.T
    norms = gram.diagonal().sqrt().clamp_min(1e-300)  # [N]
    return (gram / norms[:, None] / norms[None, :]).numpy()


def top_k_peers(similarity: np.ndarray, k: int) -> tuple[tuple[int, ...], ...]:
    """For every row i, the k columns j != i of highest similarity; ties go to the lower j."""
    n = similarity.shape[0]
    out = []
    for i in range(n):
        others = [j for j in range(n) if j != i]
        order = sorted(others, key=lambda j: (-similarity[i, j], j))
        out.append(tuple(order[:k]))
    return tuple(out)


def _local_update(alg, ctx: Context, state: State, r: int):
    n = ctx.federation.num_clients
    jobs = [ctx.job(state.models[i], (i,), alg.conditioned, seed=(r, i)) for i in range(n)]
    replies = aggregate(ctx, range(n), ctx.engine.train(ctx.spec(alg.conditioned), jobs))
    return [res.params for res in replies.results], replies.loss


@dataclass(frozen=True)
class DAC(Algorithm):
    clusters: int = 2  # K, the true number of clusters (sets the default k)
    k: int | None = None  # peers each client averages with; None: round(N / clusters) - 1

    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True
    num_clusters_field: ClassVar[str] = "clusters"  # the runner fills it with the true K unless given

    def __post_init__(self):
        if self.clusters < 1 or (self.k is not None and self.k < 0):
            raise FedcondError(f"DAC needs clusters >= 1 and k >= 0, got clusters={self.clusters}, k={self.k}")

    def peers(self, num_clients: int) -> int:
        k = round(num_clients / self.clusters) - 1 if self.k is None else self.k
        return max(0, min(num_clients - 1, k))

    def plain_jobs(self) -> bool:
        return True

    def init(self, ctx: Context) -> State:
        n = ctx.federation.num_clients
        return State(models=(ctx.init_params(self.conditioned),) * n, assignment=tuple(range(n)))

    def round(self, ctx: Context, state: State, r: int) -> State:
        n = ctx.federation.num_clients
        trained, loss = _local_update(self, ctx, state, r)
        sim = cosine_matrix(trained, parameter_names(ctx.spec(self.conditioned)))  # [N, N]
        neighbours = top_k_peers(sim, self.peers(n))
        mixing = np.zeros((n, n))  # row i: uniform over client i and its neighbours
        for i in range(n):
            mixing[i, [i, *neighbours[i]]] = 1.0
        models = tuple(mix(trained, mixing))
        return State(
            models=models, assignment=state.assignment, round=r + 1, train_loss=loss, extra={"neighbours": neighbours}
        )


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - np.max(z))  # shifted: the same values without overflow
    return e / e.sum()


def sampling_probabilities(priors: np.ndarray, i: int, tau: float) -> np.ndarray:
    """p_i [N]: softmax of tau * a_ij over j != i, and 0 for i itself."""
    others = np.arange(priors.shape[0]) != i
    p = np.zeros(priors.shape[0])
    p[others] = softmax(tau * priors[i, others])
    return p


def two_hop_priors(priors: np.ndarray, row: np.ndarray, i: int, sampled, ever_sampled: np.ndarray) -> np.ndarray:
    """Client i's priors after learning about its sampled peers' peers (step 3).

    `priors` [N, N] are everyone's priors before the round, `row` [N] client i's priors with this
    round's scores already written, `ever_sampled` [N] bool whether i has sampled j (this round included).
    """
    new = row.copy()
    candidates = set()
    for k in sampled:
        candidates |= set(np.flatnonzero(priors[k] > 0).tolist())
    for j in sorted(candidates):
        if j == i or ever_sampled[j]:
            continue
        knowers = [k for k in sampled if priors[k, j] > 0]
        best = max(knowers, key=lambda k: row[k])  # max keeps the first of equals: the first drawn
        new[j] = priors[best, j]
    return new


@dataclass(frozen=True)
class DACLoss(Algorithm):
    n_sampled: int = 5  # neighbours drawn per client and round
    tau: float = 10.0  # softmax temperature (multiplies the similarities)
    aggregation: str = "size"  # size: n_j-weighted mean (authors' code) | softmax: softmax(tau * a_ij)

    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True

    def __post_init__(self):
        if self.n_sampled < 1:
            raise FedcondError(f"DACLoss needs n_sampled >= 1, got {self.n_sampled}")
        if self.aggregation not in ("size", "softmax"):
            raise FedcondError(f"DACLoss aggregation must be 'size' or 'softmax', got '{self.aggregation}'")

    def plain_jobs(self) -> bool:
        return True

    def init(self, ctx: Context) -> State:
        n = ctx.federation.num_clients
        return State(
            models=(ctx.init_params(self.conditioned),) * n,
            assignment=tuple(range(n)),
            extra={"priors": np.zeros((n, n)), "n_sampled": np.zeros((n, n), dtype=np.int64)},
        )

    def round(self, ctx: Context, state: State, r: int) -> State:
        n = ctx.federation.num_clients
        m = min(self.n_sampled, n - 1)
        trained, loss = _local_update(self, ctx, state, r)
        priors, counts = state.extra["priors"], state.extra["n_sampled"]  # [N, N] each, read only
        if m == 0:  # a single client has no one to talk to
            return State(
                models=tuple(trained), assignment=state.assignment, round=r + 1, train_loss=loss, extra=state.extra
            )

        rng = np.random.default_rng(np.random.SeedSequence([ctx.seed, SAMPLING, r]))
        sampled = [
            tuple(int(j) for j in rng.choice(n, m, replace=False, p=sampling_probabilities(priors, i, self.tau)))
            for i in range(n)
        ]
        items, own = [], self.aggregation == "softmax"
        for i in range(n):
            x, y, s = ctx.pooled((i,), self.conditioned)
            items += [(trained[j], x, y, s) for j in ((i, *sampled[i]) if own else sampled[i])]
        flat = ctx.engine.losses(ctx.spec(self.conditioned), items)
        losses = np.asarray(flat).reshape(n, m + own)  # [N, (1 +) m]: l_ij for (i and) the sampled j

        new_priors, new_counts, models = priors.copy(), counts.copy(), []
        sizes = ctx.federation.sizes()
        for i in range(n):
            score = 1.0 / np.maximum(losses[i], 1e-12)  # [(1 +) m] similarities a_ij
            row = priors[i].copy()
            row[list(sampled[i])] = score[own:]
            new_counts[i, list(sampled[i])] += 1
            new_priors[i] = two_hop_priors(priors, row, i, sampled[i], new_counts[i] > 0)
            group = (i, *sampled[i])
            weights = softmax(self.tau * score) if own else sizes[list(group)]
            models.append(weighted_average([trained[j] for j in group], weights))
        return State(
            models=tuple(models),
            assignment=state.assignment,
            round=r + 1,
            train_loss=loss,
            extra={"priors": new_priors, "n_sampled": new_counts, "sampled": tuple(sampled)},
        )
