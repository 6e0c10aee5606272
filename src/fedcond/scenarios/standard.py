"""The standard partitions of personalised-FL papers as scenario families (partitioners.py has the
definitions): `dirichlet`, `pathological`, `shards` and `quantity`.

Every builder takes the dataset, the clients in total, its parameter (alpha, k, shards per client,
sigma), `samples` (training samples per client on average; None: the whole train set) and a seed.

Test data: a client receives, of every class's test samples, the share of that class's training
samples it holds (`partitioners.test_counts`), so its test labels follow its own training label
mix (exactly when every class has the same train/test ratio, as after a stratified split; MNIST's
ratios differ by class within a few percent) and the clients' test sets are disjoint.

Ground truth: `pathological` groups the clients that hold the same class set; `quantity` (labels
IID) is one cluster; `dirichlet` and `shards` have none (`GroundTruth.known` is False), so Oracle
refuses them and no clustering is scored by ARI.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import FedcondError
from . import partitioners as P
from .federation import ClientData, Federation, GroundTruth, Scenario
from .partition import _normalisation, to_nchw

NO_CLUSTERS = "none"  # the one cluster name of a scenario whose clients have no true clusters


def _rng(seed: int, purpose: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, purpose]))


def _check(clients: int, samples: int | None, n_train: int) -> int:
    if clients < 1:
        raise FedcondError(f"clients must be at least 1, got {clients}")
    if samples is None:
        return n_train
    if samples < 1:
        raise FedcondError(f"samples per client must be at least 1, got {samples}")
    if clients * samples > n_train:
        raise FedcondError(
            f"{clients} clients x {samples} samples is more than the {n_train} training samples; "
            f"at most {n_train // clients} per client"
        )
    return clients * samples


def dirichlet_label_skew(
    dataset: str,
    load,
    alpha: float = 0.3,
    clients: int = 100,
    samples: int | None = None,
    sigma: float = 0.0,
    seed: int = 0,
) -> Scenario:
    """Dirichlet label skew (Hsu et al. 2019): client i's class proportions q_i ~ Dir(alpha), its
    size equal (sigma = 0) or log-normal (quantity skew). With `samples` per client and no class
    running short, its counts are round(n_i q_i); with the whole train set the targets are fitted
    to the classes' supply (partitioners.dirichlet_counts). No true clusters."""
    data = load(dataset)
    y = np.asarray(data.y_train)
    C = len(data.classes)
    total = _check(clients, samples, len(y))
    rng = _rng(seed, 0xD1C7)  # purpose: the Dirichlet partition
    sizes = P.client_sizes(total, clients, sigma, rng)
    supply = np.bincount(y, minlength=C)
    counts, _ = P.dirichlet_counts(supply, sizes, alpha, rng, exact=samples is None)
    params = {"alpha": alpha, "clients": clients, "samples": samples, "sigma": sigma, "seed": seed}
    return _build("dirichlet", dataset, data, counts, None, rng, params)


def pathological_label_skew(
    dataset: str,
    load,
    k: int = 2,
    clients: int = 100,
    samples: int | None = None,
    sigma: float = 0.0,
    seed: int = 0,
) -> Scenario:
    """k-class pathological label skew: each client holds exactly k classes drawn at random; each
    class's samples are divided among its holders evenly (sigma = 0) or by log-normal weights.
    True clusters: the clients with the same class set."""
    data = load(dataset)
    y = np.asarray(data.y_train)
    C = len(data.classes)
    total = _check(clients, samples, len(y))
    rng = _rng(seed, 0x9A7C)  # purpose: the pathological partition
    if sigma < 0:
        raise FedcondError(f"sigma must be >= 0, got {sigma}")
    weights = rng.lognormal(0.0, sigma, size=clients) if sigma else None  # quantity skew within each class
    supply = np.bincount(y, minlength=C)
    if samples is not None:  # the same share of every class, so the whole set's class balance stays
        supply = P.largest_remainder(total, supply)
    counts, sets = P.pathological_counts(supply, clients, k, rng, weights)
    names = sorted(set(sets))
    cluster = np.array([names.index(s) for s in sets], dtype=np.int64)
    truth = GroundTruth(cluster, tuple("classes " + ",".join(map(str, s)) for s in names))
    params = {"k": k, "clients": clients, "samples": samples, "sigma": sigma, "seed": seed}
    return _build("pathological", dataset, data, counts, truth, rng, params)


def label_sorted_shards(
    dataset: str,
    load,
    shards: int = 2,
    clients: int = 100,
    samples: int | None = None,
    seed: int = 0,
) -> Scenario:
    """Shards (McMahan et al. 2017): the training samples (a random `samples * clients` of them, or all)
    sorted by label, cut into clients x `shards` equal shards, `shards` per client. No true clusters."""
    data = load(dataset)
    y = np.asarray(data.y_train)
    total = _check(clients, samples, len(y))
    rng = _rng(seed, 0x5A4D)  # purpose: the shards
    pool = np.sort(rng.permutation(len(y))[:total])
    parts = [pool[p] for p in P.shards(y[pool], clients, shards, rng)]
    counts = P.counts_of(y, parts, len(data.classes))
    params = {"shards": shards, "clients": clients, "samples": samples, "seed": seed}
    return _build("shards", dataset, data, counts, None, rng, params, train_parts=parts)


def quantity_skew(
    dataset: str,
    load,
    sigma: float = 1.0,
    clients: int = 100,
    samples: int | None = None,
    seed: int = 0,
) -> Scenario:
    """Quantity skew alone: IID labels (every client the dataset's class mix), log-normal sizes.
    One true cluster (every client draws from the same distribution)."""
    data = load(dataset)
    y = np.asarray(data.y_train)
    C = len(data.classes)
    total = _check(clients, samples, len(y))
    rng = _rng(seed, 0x0A27)  # purpose: the quantity-skew partition
    sizes = P.client_sizes(total, clients, sigma, rng)
    supply = P.largest_remainder(total, np.bincount(y, minlength=C))
    # every class dealt in proportion to the sizes: each client holds the dataset's class mix
    counts = np.stack([P.largest_remainder(int(supply[c]), sizes) for c in range(C)], axis=1)
    truth = GroundTruth(np.zeros(clients, dtype=np.int64), ("iid",))
    params = {"sigma": sigma, "clients": clients, "samples": samples, "seed": seed}
    return _build("quantity", dataset, data, counts, truth, rng, params)


def _build(family, dataset, data, counts, truth, rng, params, train_parts=None) -> Scenario:
    """Deal the counts (or take the given training parts), give each client its test share, and
    assemble the Scenario."""
    y_train, y_test = np.asarray(data.y_train), np.asarray(data.y_test)
    C = len(data.classes)
    train = train_parts if train_parts is not None else P.deal(y_train, counts, rng)
    empty = [i for i, p in enumerate(train) if len(p) == 0]
    if empty:
        raise FedcondError(
            f"{family}: client {empty[0]} gets no training sample ({len(empty)} such); use fewer clients"
        )
    supply_train, supply_test = np.bincount(y_train, minlength=C), np.bincount(y_test, minlength=C)
    test = P.deal(y_test, P.test_counts(counts, supply_train, supply_test), rng)
    x_tr, x_te = to_nchw(data.x_train), to_nchw(data.x_test)
    yt_tr, yt_te = torch.as_tensor(y_train, dtype=torch.int64), torch.as_tensor(y_test, dtype=torch.int64)
    clients = tuple(
        ClientData(
            x_tr[torch.from_numpy(a)], yt_tr[torch.from_numpy(a)], x_te[torch.from_numpy(b)], yt_te[torch.from_numpy(b)]
        )
        for a, b in zip(train, test)
    )
    if truth is None:
        truth = GroundTruth(np.zeros(len(clients), dtype=np.int64), (NO_CLUSTERS,), known=False)
    mean, std = _normalisation({dataset: data})
    fed = Federation(
        family=family,
        dataset=dataset,
        clients=clients,
        num_classes=C,
        input_shape=(int(x_tr.shape[1]), int(x_tr.shape[2]), int(x_tr.shape[3])),
        mean=mean,
        std=std,
        label_names=tuple(data.classes),
        params={k: v for k, v in params.items() if v is not None},
    )
    return Scenario(fed, truth)
