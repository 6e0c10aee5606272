"""Pseudo-domain discovery (SPEC C.1): brief local training from one common start, then k-means
on the clients' normalised update vectors.

Procedure (named defaults in `DiscoveryConfig`):
1. Every client starts from the same weights w0 (the run's initialisation of the plain C-way
   model) and trains `e0` epochs with the run's optimiser at batch size `batch_size`. Training
   runs as chained one-epoch jobs with momentum carried over, so the update after e epochs is
   exactly the snapshot of a longer run: one 5-epoch training gives E0 = 1..5 for the diagnostics.
2. u_i = (w_i - w0) restricted to a layer subset, L2-normalised. Subsets (by module, so any of our
   backbones works): A = the head; B = the last conv block + the head (default); C = the last two
   conv blocks + the head.
3. k-means (scikit-learn, k-means++, n_init = 10, seeded) on the u_i for M = 1..max_slots.
   M is the user's, or the elbow of the inertia curve: scale M and inertia to [0, 1]; the elbow
   is the M whose point lies farthest below the chord from the first point to the last (the
   "kneedle" rule). Client i's pseudo-domain z_i is its k-means label for the chosen M.
4. The centroids' cosine similarities feed the graded targets.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import FedcondError

LAYER_SUBSETS = ("A", "B", "C")
_DISCOVERY = 0xD15C  # names the discovery jobs' batch-order streams


@dataclass(frozen=True)
class DiscoveryConfig:
    e0: int = 3  # local epochs before clustering (SPEC C.1)
    batch_size: int | None = None  # None: the run's batch size
    layers: str = "B"  # A = head, B = last conv block + head, C = last two conv blocks + head
    slots: int | None = None  # M; None: the elbow's choice
    max_slots: int = 8  # the elbow looks at M = 1..max_slots (at most clients - 1)

    def __post_init__(self):
        if self.e0 < 1:
            raise FedcondError(f"discovery needs e0 >= 1 local epochs, got {self.e0}")
        if self.layers not in LAYER_SUBSETS:
            raise FedcondError(
                f"unknown layer subset '{self.layers}'; choose A (head), "
                "B (last conv + head) or C (last two convs + head)"
            )
        if self.slots is not None and self.slots < 1:
            raise FedcondError(f"the number of pseudo-domains M must be at least 1, got {self.slots}")
        if self.batch_size is not None and self.batch_size < 1:
            raise FedcondError(f"discovery batch size must be at least 1, got {self.batch_size}")


@dataclass(frozen=True)
class Discovery:
    domains: tuple[int, ...]  # z_i per client
    slots: int  # M
    centroid_cos: np.ndarray  # [M, M] cosine similarity of the k-means centroids
    inertia: tuple[float, ...]  # k-means inertia for M = 1..len(inertia)
    elbow: int  # what the elbow rule picks (recorded even when M was fixed)


def has_blocks(model: torch.nn.Module) -> bool:
    """Whether the network has fedcond's conv `blocks` (subsets B and C); a plug-in's may not."""
    return isinstance(getattr(model, "blocks", None), torch.nn.ModuleList)


def layer_names(model: torch.nn.Module, subset: str) -> tuple[str, ...]:
    """state_dict keys of the parameters in a layer subset (A/B/C), found by module identity."""
    modules = [model.head]
    if subset in ("B", "C") and not has_blocks(model):
        raise FedcondError(
            f"JDFL's layer subset {subset} takes the last conv blocks (`blocks`) of fedcond's own networks; "
            "with another network use layers=A (the head only)"
        )
    if subset in ("B", "C"):
        modules.append(model.blocks[-1])
    if subset == "C":
        modules.append(model.blocks[-2])
    wanted = {id(p) for m in modules for p in m.parameters()}
    return tuple(name for name, p in model.named_parameters() if id(p) in wanted)


def elbow(inertia: np.ndarray) -> int:
    """The kneedle elbow of a decreasing inertia curve over M = 1..len (returns M)."""
    y = np.asarray(inertia, dtype=np.float64)
    if len(y) <= 2 or y[0] - y[-1] <= 1e-12 * max(1.0, abs(y[0])):
        return 1
    x = np.linspace(0.0, 1.0, len(y))
    yn = (y - y[-1]) / (y[0] - y[-1])  # 1 at M = 1, 0 at the largest M
    gap = (1.0 - x) - yn  # how far below the chord
    return int(np.argmax(gap)) + 1


def update_snapshots(ctx, epochs: int, batch_size: int | None = None) -> tuple[dict, list[dict]]:
    """w0 and, for e = 1..epochs, every client's weights after e epochs ([e][client] -> params), kept
    only for the widest layer subset (C), so five snapshots of twenty clients stay small."""
    spec = ctx.spec(False)
    w0 = ctx.init_params(False)
    with torch.random.fork_rng(devices=[]):
        model = spec.build()
        keep = layer_names(model, "C" if has_blocks(model) else "A")  # the widest subset the network has
    sgd = dataclasses.replace(ctx.sgd, batch_size=batch_size) if batch_size else None
    n = ctx.federation.num_clients
    current = [w0] * n
    momentum = [None] * n
    snaps = []
    for e in range(epochs):
        jobs = [
            ctx.job(
                current[i],
                (i,),
                False,
                seed=(_DISCOVERY, e, i),
                epochs=1,
                momentum=momentum[i],
                keep_momentum=True,
                sgd=sgd,
            )
            for i in range(n)
        ]
        results = ctx.engine.train(spec, jobs)
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:  # every client's update vector is needed: discovery cannot go on without one
            raise FedcondError(f"JDFL discovery: client(s) {missing} did not reply in epoch {e + 1}")
        current = [r.params for r in results]
        momentum = [r.momentum for r in results]
        snaps.append([{k: p[k] for k in keep} for p in current])
    return w0, snaps


def update_vectors(model: torch.nn.Module, w0: dict, weights: list[dict], subset: str) -> np.ndarray:
    """L2-normalised update vectors [N, P] over a layer subset."""
    names = layer_names(model, subset)
    u = np.stack([torch.cat([(w[k] - w0[k]).reshape(-1) for k in names]).double().numpy() for w in weights])
    norms = np.linalg.norm(u, axis=1, keepdims=True)
    return u / np.maximum(norms, 1e-12)


def fit_all(vectors: np.ndarray, max_m: int, seed: int) -> dict:
    """k-means for M = 1..max_m on the rows of `vectors` [N, P].

    The N rows span at most N dimensions, so k-means runs on their coordinates in an orthonormal
    basis of that span (U S of the SVD): every distance, inertia and centroid inner product is
    the same as in the P-dimensional space (P ~ 10^5 here), at a fraction of the cost."""
    from sklearn.cluster import KMeans

    u, sv, _ = np.linalg.svd(vectors, full_matrices=False)
    coords = u * sv  # [N, min(N, P)]
    return {m: KMeans(n_clusters=m, n_init=10, random_state=seed).fit(coords) for m in range(1, max_m + 1)}


def cluster(vectors: np.ndarray, slots: int | None, max_slots: int, seed: int, fits: dict | None = None) -> Discovery:
    """k-means over M = 1..max_slots; M = `slots` or the elbow's choice (`fits`: from fit_all, to reuse)."""
    n = vectors.shape[0]
    top = max(1, min(max_slots, n - 1))
    if slots is not None and slots > n:
        raise FedcondError(f"cannot form M={slots} pseudo-domains from {n} clients")
    need = max(top, slots or 1)
    if fits is None or any(m not in fits for m in range(1, need + 1)):
        fits = fit_all(vectors, need, seed)
    inertia = tuple(float(fits[m].inertia_) for m in range(1, top + 1))
    chosen_by_elbow = elbow(np.array(inertia))
    m = slots if slots is not None else chosen_by_elbow
    km = fits[m]
    c = km.cluster_centers_
    c = c / np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)
    return Discovery(tuple(int(v) for v in km.labels_), m, c @ c.T, inertia, chosen_by_elbow)


def discover(ctx, config: DiscoveryConfig) -> Discovery:
    """Run discovery for one configuration (training cached per federation, seed and optimiser)."""
    if config.slots == 1:  # nothing to discover: one pseudo-domain
        return Discovery((0,) * ctx.federation.num_clients, 1, np.ones((1, 1)), (), 1)
    w0, snaps = cached_snapshots(ctx, config.e0, config.batch_size)
    with torch.random.fork_rng(devices=[]):
        model = ctx.spec(False).build()
    vectors = update_vectors(model, w0, snaps[config.e0 - 1], config.layers)
    return cluster(vectors, config.slots, config.max_slots, ctx.seed)


_CACHE: list = []  # [(key, federation, result)]: the last few trainings (a sweep's cells share them)


def cached_snapshots(ctx, epochs: int, batch_size: int | None):
    key = (ctx.seed, ctx.spec(False), ctx.sgd, batch_size)
    for k, fed, (w0, snaps) in _CACHE:
        if k == key and fed is ctx.federation and len(snaps) >= epochs:
            return w0, snaps
    w0, snaps = update_snapshots(ctx, epochs, batch_size)
    _CACHE[:] = [e for e in _CACHE if not (e[0] == key and e[1] is ctx.federation)][-3:] + [
        (key, ctx.federation, (w0, snaps))
    ]
    return w0, snaps
