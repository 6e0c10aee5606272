"""Clients the model has never seen: held out of training, evaluated with what training produced.

`--holdout-clients N` takes the last N clients of every true cluster out of the federation before
training. Each computes its own statistic from its own data (the statistics are local, so a
newcomer can), normalised with the training population's z-score parameters (it took no part
in the secure sum), and is evaluated on its own test set with the model the method would give a
newcomer: the one global model (FedAvg, Conditional, Conditional-FedAvg and other single-model
methods, Conditional with the newcomer's statistic), its true cluster's model (Oracle). Methods
whose models belong to the training clients (Local, Ditto, Gossip, DAC) have nothing to give a
newcomer and report no unseen accuracy. A method that serves newcomers its own way (FedAvg-FT and
FedRep fine-tune, pFedHN fits an embedding, PeFLL embeds the newcomer's data) says so with
`serve_newcomer(ctx, state, client, client_id) -> params` (the `Algorithm` contract; its default,
None, leaves the choice here).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from . import stats as S
from .algorithms import Algorithm, Context, State
from .client_stats import raw_statistics
from .engine import predict
from .errors import FedcondError
from .protocol import Protocol
from .results import pack_hits
from .scenarios import Scenario


@dataclasses.dataclass(frozen=True)
class Unseen:
    """The held-out clients: their index in the full scenario, data and true cluster; and the
    training clients' indices in the full scenario (what names a client's random control vector)."""

    ids: tuple[int, ...]
    clients: tuple
    cluster: np.ndarray
    kept: tuple[int, ...] = ()


def hold_out(scenario: Scenario, per_cluster: int) -> tuple[Scenario, Unseen]:
    """The scenario without the last `per_cluster` clients of each true cluster, and those clients."""
    fed, truth = scenario.federation, scenario.truth
    held = []
    for k in range(truth.num_clusters):
        members = np.flatnonzero(truth.cluster == k)
        if len(members) <= per_cluster:
            raise FedcondError(
                f"--holdout-clients {per_cluster}: cluster {k} has only {len(members)} clients; "
                "at least one must stay in training"
            )
        held += members[-per_cluster:].tolist()
    held = sorted(held)
    kept = [i for i in range(fed.num_clients) if i not in set(held)]
    train = Scenario(
        dataclasses.replace(fed, clients=tuple(fed.clients[i] for i in kept)),
        dataclasses.replace(truth, cluster=truth.cluster[kept]),
    )
    return train, Unseen(tuple(held), tuple(fed.clients[i] for i in held), truth.cluster[held], tuple(kept))


def newcomer_model(alg: Algorithm, state: State, train_cluster: np.ndarray, cluster: int) -> int | None:
    """The model index a newcomer of true cluster `cluster` gets, or None where the method has none to give."""
    if alg.needs_truth:  # Oracle: its cluster's model, the one its cluster's training clients use
        members = np.flatnonzero(train_cluster == cluster)
        return state.assignment[int(members[0])]
    if len(set(state.assignment)) == 1:  # every client predicts with one model (FedAvg, Conditional, FedDyn's average)
        return state.assignment[0]
    return None


def unseen_statistics(ctx: Context, protocol: Protocol, unseen: Unseen, train_raw: np.ndarray, data_dir, seed: int):
    """The newcomers' statistics [n, dim], each from its own data, normalised with the training population's."""
    raw = raw_statistics(ctx.federation, protocol, data_dir, seed, clients=list(unseen.clients), ids=unseen.ids)
    return torch.as_tensor(S.normalise_with(raw, train_raw, protocol.stats_normalisation), dtype=torch.float32)


def float32_accuracy(right: int, n: int) -> float:
    """right / n in float32, as torch's mean gave a newcomer's accuracy before its hits were kept: rows of
    either kind agree to the digit (and a stored accuracy can be checked as a whole count)."""
    return float(np.float32(right) / np.float32(n)) if n else 0.0


def evaluate_unseen(
    ctx: Context, alg: Algorithm, state: State, unseen: Unseen, train_cluster: np.ndarray, stats: torch.Tensor | None
) -> dict:
    """{"unseen_accuracy", "unseen_per_client", "unseen_clients", "unseen_test_hits"}; empty where the
    method has no model for a newcomer."""
    model = ctx.spec(alg.conditioned).build()
    hits = []
    for j, (client, k) in enumerate(zip(unseen.clients, unseen.cluster)):
        params = alg.serve_newcomer(ctx, state, client, unseen.ids[j])  # the method's own protocol, if any
        if params is None:
            g = newcomer_model(alg, state, train_cluster, int(k))
            if g is None:
                return {}
            params = state.models[g]
        s = stats[j].expand(client.n_test, -1) if alg.conditioned else None
        pred = predict(model, params, client.x_test, s, scores=ctx.scores)
        hits.append((pred == client.y_test).numpy().astype(bool))
    per_client = [float32_accuracy(int(h.sum()), h.size) for h in hits]
    return {
        "unseen_accuracy": float(np.mean(per_client)),
        "unseen_per_client": per_client,
        "unseen_clients": list(unseen.ids),
        # which newcomer test samples were right: a gap between two methods can be tested sample by sample
        "unseen_test_hits": pack_hits(hits),
    }
