"""The standard partitions of personalised-FL papers, on labels only (numpy; no images, no torch).

Each function returns a `counts` matrix [clients, classes] (how many training samples of each
class a client holds) or the clients' index arrays directly; `deal` turns counts into disjoint
index arrays and `test_counts` gives every client a test share with its training label mix.

- Dirichlet label skew (Hsu et al. 2019, "Measuring the effects of non-identical data
  distribution"): client i's class proportions q_i ~ Dir(alpha * 1_C), its counts n_i * q_i.
- k-class pathological (McMahan et al. 2017's idea, as flwr-datasets' PathologicalPartitioner
  with random class assignment): client i holds k classes drawn at random; each class's samples
  are divided evenly among the clients that hold it.
- shards (McMahan et al. 2017): the samples sorted by label, cut into clients * s equal shards,
  each client gets s shards at random.
- quantity skew: client sizes n_i proportional to log-normal draws exp(N(0, sigma^2)) (sigma = 0:
  equal), combinable with Dirichlet and pathological label skew.
"""

from __future__ import annotations

import numpy as np

from ..errors import FedcondError


def largest_remainder(total: int, weights: np.ndarray) -> np.ndarray:
    """`total` split into integers proportional to `weights` (Hamilton's method): exact sum, each
    part within 1 of its share; ties go to the lower index (deterministic)."""
    weights = np.asarray(weights, dtype=np.float64)
    if total == 0 or weights.sum() <= 0:
        return np.zeros(len(weights), dtype=np.int64)
    share = total * weights / weights.sum()
    out = np.floor(share).astype(np.int64)
    rest = int(total - out.sum())
    if rest:
        order = np.argsort(-(share - out), kind="stable")
        out[order[:rest]] += 1
    return out


def client_sizes(total: int, clients: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """`total` samples over `clients`: equal for sigma = 0, else proportional to log-normal draws
    (quantity skew), every client at least one sample."""
    if clients < 1:
        raise FedcondError(f"clients must be at least 1, got {clients}")
    if sigma < 0:
        raise FedcondError(f"sigma must be >= 0, got {sigma}")
    if total < clients:
        raise FedcondError(f"{total} samples cannot give each of {clients} clients one")
    weights = np.ones(clients) if sigma == 0 else rng.lognormal(0.0, sigma, size=clients)
    sizes = 1 + largest_remainder(total - clients, weights)  # the floor of one keeps every client present
    return sizes


def dirichlet_counts(
    supply: np.ndarray, sizes: np.ndarray, alpha: float, rng: np.random.Generator, exact: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Counts [clients, classes] with client i's row close to sizes[i] * q_i, q_i ~ Dir(alpha),
    and the q_i drawn. `supply[c]`: samples of class c available. While no class runs short the
    counts are the rounded targets themselves (the Dirichlet holds exactly, up to rounding);
    `exact` (the whole train set) or a class running short: the targets are fitted to the supply by
    iterative proportional fitting (rows to the sizes, columns to the supply or below it), which keeps
    every zero a zero and scales each class by one factor, then rounded class by class."""
    if not alpha > 0:
        raise FedcondError(f"alpha must be > 0, got {alpha}")
    C = len(supply)
    q = rng.dirichlet(np.full(C, float(alpha)), size=len(sizes))  # [clients, C]
    q = np.where(np.isfinite(q), q, 0.0)
    empty = q.sum(axis=1) <= 0  # tiny alpha can underflow a whole row: that client takes one class
    q[empty, rng.integers(0, C, size=int(empty.sum()))] = 1.0
    q /= q.sum(axis=1, keepdims=True)
    target = sizes[:, None] * q
    if not exact:
        counts = np.stack([largest_remainder(int(n), row) for n, row in zip(sizes, q)])
        if np.all(counts.sum(axis=0) <= supply):
            return counts, q
    fitted = _fit(target, sizes.astype(np.float64), supply.astype(np.float64), exact)
    totals = np.minimum(np.round(fitted.sum(axis=0)).astype(np.int64), supply)
    counts = np.stack([largest_remainder(int(totals[c]), fitted[:, c]) for c in range(C)], axis=1)
    return counts, q


def _fit(target: np.ndarray, rows: np.ndarray, caps: np.ndarray, exact: bool, iters: int = 200) -> np.ndarray:
    """Iterative proportional fitting: rows summing to `rows`, columns to `caps` (exact) or at most."""
    m = target.copy()
    for _ in range(iters):
        m *= (rows / np.maximum(m.sum(axis=1), 1e-12))[:, None]
        col = m.sum(axis=0)
        scale = caps / np.maximum(col, 1e-12)
        m *= (scale if exact else np.minimum(scale, 1.0))[None, :]
    return m


def pathological_counts(
    supply: np.ndarray, clients: int, k: int, rng: np.random.Generator, sizes: np.ndarray | None = None
) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Counts [clients, classes] where each client holds exactly k classes, drawn at random, and
    the class sets. Each class's supply is divided among its holders: evenly, or in proportion to
    `sizes` (quantity skew: a larger client takes more of each of its classes)."""
    C = len(supply)
    if not 1 <= k <= C:
        raise FedcondError(f"pathological partition needs 1 <= k <= {C} (the classes), got k={k}")
    sets = [tuple(sorted(int(c) for c in rng.choice(C, size=k, replace=False))) for _ in range(clients)]
    weights = np.ones(clients) if sizes is None else sizes.astype(np.float64)
    counts = np.zeros((clients, C), dtype=np.int64)
    for c in range(C):
        holders = [i for i, s in enumerate(sets) if c in s]
        if holders:
            counts[holders, c] = largest_remainder(int(supply[c]), weights[holders])
    short = [i for i in range(clients) if np.any(counts[i, list(sets[i])] == 0)]
    if short:
        raise FedcondError(
            f"pathological partition: client {short[0]} gets no sample of one of its classes "
            f"({len(short)} such clients); use fewer clients or a larger data fraction"
        )
    return counts, sets


def deal(y: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Disjoint index arrays: client i gets counts[i, c] random samples of class c (sorted indices)."""
    out: list[list[np.ndarray]] = [[] for _ in range(len(counts))]
    for c in range(counts.shape[1]):
        idx = rng.permutation(np.flatnonzero(y == c))
        if counts[:, c].sum() > len(idx):
            raise FedcondError(f"class {c} has {len(idx)} samples, fewer than the {counts[:, c].sum()} dealt")
        cuts = np.cumsum(counts[:, c])[:-1]
        for i, part in enumerate(np.split(idx[: counts[:, c].sum()], cuts)):
            out[i].append(part)
    return [np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64) for parts in out]


def shards(y: np.ndarray, clients: int, per_client: int, rng: np.random.Generator) -> list[np.ndarray]:
    """McMahan et al. 2017: the samples sorted by label (ties in random order), cut into
    clients * per_client equal shards, each client gets per_client shards at random; disjoint, and
    they cover the data (the remainder of the division goes to the first shards)."""
    n = clients * per_client
    if per_client < 1:
        raise FedcondError(f"shards per client must be at least 1, got {per_client}")
    if n > len(y):
        raise FedcondError(f"{clients} clients x {per_client} shards is more than the {len(y)} samples")
    order = rng.permutation(len(y))
    order = order[np.argsort(y[order], kind="stable")]
    pieces = np.array_split(order, n)
    perm = rng.permutation(n)
    return [
        np.sort(np.concatenate([pieces[j] for j in perm[i * per_client : (i + 1) * per_client]]))
        for i in range(clients)
    ]


def counts_of(y: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
    """The counts matrix [clients, classes] of index arrays."""
    return np.stack([np.bincount(y[p], minlength=num_classes) for p in parts]) if parts else np.zeros((0, num_classes))


def test_counts(train_counts: np.ndarray, train_supply: np.ndarray, test_supply: np.ndarray) -> np.ndarray:
    """Each client's test counts: of class c's test samples, the share of class c's training
    samples the client holds (apportioned by largest remainder; what nobody holds stays unused).
    So a client's test labels follow its training labels (exactly where the train/test ratio is
    the same for every class, as in a stratified split) and the test shares are disjoint."""
    clients, C = train_counts.shape
    out = np.zeros_like(train_counts)
    for c in range(C):
        if train_supply[c] == 0:
            continue
        unused = max(int(train_supply[c] - train_counts[:, c].sum()), 0)
        weights = np.append(train_counts[:, c].astype(np.float64), unused)
        out[:, c] = largest_remainder(int(test_supply[c]), weights)[:clients]
    return out
