"""One builder per heterogeneity family of SPEC A.6; each returns a `Scenario`.

Every builder takes the dataset name, its family parameter (K, C or a rotation configuration),
the clients per cluster (or in total, for E4a/E4b) and a seed, plus `load`, the function that
reads a dataset by name (so tests and users can supply their own data).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for annotations: scenarios take any object with ImageData's fields
    from ..data import ImageData
from ..errors import FedcondError
from . import groupings as G
from .partition import ClusterSpec, build

Loader = Callable[[str], "ImageData"]


def _label_map(num_source_classes: int, mapping: dict[int, int]) -> tuple[int, ...]:
    return tuple(mapping.get(c, -1) for c in range(num_source_classes))


def _check_clients(n: int, what: str = "clients per cluster") -> None:
    if n < 1:
        raise FedcondError(f"{what} must be at least 1, got {n}")


def label_shift(
    dataset: str, load: Loader, k: int = 2, clients_per_cluster: int = 5, seed: int = 0, groups: str | None = None
):
    """E1: cluster k sees only the classes of group k; the task keeps the full label space.

    `groups`: a grouping name or explicit groups (groupings.e1_groups; None: the default).
    CIFAR-100 uses its official 20 superclasses (K must be 20) with the 100 fine labels as the task.
    Other K than the tables' are allowed: consecutive blocks of the label order.
    """
    _check_clients(clients_per_cluster)
    data = load(dataset)
    C = len(data.classes)
    if dataset == "cifar100":
        if groups is not None:
            raise FedcondError("E1 on cifar100 uses the 20 official superclasses: --groups does not apply")
        if k != 20 or data.coarse_train is None:
            raise FedcondError("E1 on cifar100 uses the 20 official superclasses: K must be 20")
        return _cifar100_superclasses(data, clients_per_cluster, seed)
    if not 1 <= k <= C:
        raise FedcondError(f"E1 needs 1 <= K <= {C} (the classes of {dataset}), got K={k}")
    chosen = G.e1_groups(dataset, k, groups, C)
    specs = [
        ClusterSpec(
            f"group{g}:{','.join(map(str, cls))}",
            dataset,
            _label_map(C, {c: c for c in cls}),
            clients=clients_per_cluster,
        )
        for g, cls in enumerate(chosen)
    ]
    params = {**_params(locals()), "groups": G.format_groups(chosen)}
    return build("E1", dataset, specs, {dataset: data}, C, seed, tuple(data.classes), params)


def _cifar100_superclasses(data: ImageData, clients_per_cluster: int, seed: int):
    specs = []
    for g in range(20):
        fine = np.unique(data.y_train[data.coarse_train == g])
        name = data.coarse_classes[g] if data.coarse_classes else f"superclass{g}"
        specs.append(
            ClusterSpec(name, "cifar100", _label_map(100, {int(c): int(c) for c in fine}), clients=clients_per_cluster)
        )
    params = {"k": 20, "clients_per_cluster": clients_per_cluster, "seed": seed}
    return build("E1", "cifar100", specs, {"cifar100": data}, 100, seed, tuple(data.classes), params)


def subclass_shift(
    dataset: str, load: Loader, k: int = 2, clients_per_cluster: int = 5, seed: int = 0, groups: str | None = None
):
    """E2a: every cluster predicts the same superclasses, from its own share of their member classes.
    `groups`: the superclasses by grouping name or explicit member lists (groupings.e2a_superclasses)."""
    _check_clients(clients_per_cluster)
    supers = G.e2a_superclasses(dataset, groups)
    most = min(len(members) for _, members in supers)
    if not 2 <= k <= most:
        raise FedcondError(f"E2a on {dataset} needs 2 <= K <= {most} (members of the smallest superclass), got K={k}")
    data = load(dataset)
    C = len(data.classes)
    dealt = [G.deal_round_robin(members, k) for _, members in supers]  # [superclass][cluster] -> classes
    specs = []
    for c in range(k):
        mapping = {cls: t for t in range(len(supers)) for cls in dealt[t][c]}
        specs.append(
            ClusterSpec(
                f"share{c}:{','.join(map(str, sorted(mapping)))}",
                dataset,
                _label_map(C, mapping),
                clients=clients_per_cluster,
            )
        )
    names = tuple(name for name, _ in supers)
    params = {**_params(locals()), "groups": G.format_groups(m for _, m in supers)}
    return build("E2a", dataset, specs, {dataset: data}, len(supers), seed, names, params)


def rotation_shift(dataset: str, load: Loader, rotations: str = "C1", clients_per_cluster: int = 5, seed: int = 0):
    """E2b: each cluster sees the whole label space, its images rotated by its own angle."""
    _check_clients(clients_per_cluster)
    angles = G.table_for(G.ROTATIONS, rotations, "E2b rotation configuration", keyed_by="--rotations")
    data = load(dataset)
    C = len(data.classes)
    ident = tuple(range(C))
    specs = [ClusterSpec(f"rot{a:g}", dataset, ident, rotation=a, clients=clients_per_cluster) for a in angles]
    return build("E2b", dataset, specs, {dataset: data}, C, seed, tuple(data.classes), _params(locals()))


def concept_shift(dataset: str, load: Loader, k: int = 2, clients_per_cluster: int = 5, seed: int = 0):
    """E3a: the same images, labelled by a different semantic rule in each cluster."""
    _check_clients(clients_per_cluster)
    labelings = G.table_for(G.E3A_LABELINGS, dataset, "E3a (semantic concept shift)")
    if not 2 <= k <= len(labelings):
        raise FedcondError(
            f"E3a on {dataset} has {len(labelings)} labellings, so K must be 2..{len(labelings)}, got K={k}"
        )
    data = load(dataset)
    C = max(len(names) for _, names, _ in labelings[:k])
    specs = [
        ClusterSpec(name, dataset, tuple(mapping), clients=clients_per_cluster) for name, _, mapping in labelings[:k]
    ]
    names = tuple("/".join(n[i] if i < len(n) else "-" for _, n, _ in labelings[:k]) for i in range(C))
    return build("E3a", dataset, specs, {dataset: data}, C, seed, names, _params(locals()))


def label_permutations(num_classes: int, k: int, seed: int) -> list[tuple[int, ...]]:
    """E3b's K label maps for a seed: the identity, then distinct random permutations (class -> label)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x9E3B]))  # purpose: label permutations
    perms = [tuple(range(num_classes))]
    while len(perms) < k:
        p = tuple(int(v) for v in rng.permutation(num_classes))
        if p not in perms:
            perms.append(p)
    return perms


def label_permutation(dataset: str, load: Loader, k: int = 2, clients_per_cluster: int = 5, seed: int = 0):
    """E3b: every cluster classifies all classes under its own random permutation of the labels.

    Cluster 0 keeps the identity; the others get distinct random permutations drawn from the seed.
    """
    _check_clients(clients_per_cluster)
    data = load(dataset)
    C = len(data.classes)
    if not 2 <= k <= 10:
        raise FedcondError(f"E3b needs 2 <= K <= 10, got K={k}")
    perms = label_permutations(C, k, seed)
    specs = [ClusterSpec(f"perm{i}", dataset, p, clients=clients_per_cluster) for i, p in enumerate(perms)]
    return build(
        "E3b", dataset, specs, {dataset: data}, C, seed, tuple(f"label{c}" for c in range(C)), _params(locals())
    )


def cross_dataset(
    dataset: str, load: Loader, clients: int = 10, seed: int = 0, pair: tuple[str, str] = ("mnist", "fmnist")
):
    """E4a: cluster 0 holds one dataset, cluster 1 another (MNIST and Fashion-MNIST), both 10-class."""
    if clients < 2 or clients % 2:
        raise FedcondError(f"E4a splits clients evenly over 2 datasets: --clients must be even and >= 2, got {clients}")
    sources = {name: load(name) for name in pair}
    C = len(sources[pair[0]].classes)
    ident = tuple(range(C))
    specs = [ClusterSpec(name, name, ident, clients=clients // 2) for name in pair]
    return build(
        "E4a",
        "+".join(pair),
        specs,
        sources,
        C,
        seed,
        tuple(f"label{c}" for c in range(C)),
        {"clients": clients, "seed": seed},
    )


def e4b_clusters(dataset: str, c: int, num_source_classes: int = 10) -> list[tuple[str, tuple[int, ...]]]:
    """E4b's 2C clusters as (name, label map): two concept groups (the two E3a labellings), each
    split into C subclass clusters. In concept group g, member j of task label t goes to cluster
    (t + j) mod C in the first group and (t - j) mod C in the second: the labels' leftovers land
    in different clusters, and the two groups are dealt in opposite directions. A plain
    round-robin (member j to cluster j mod C in both groups) left CIFAR-10's fourth share at C=4
    holding only trucks in both groups, both labelled 0: two identical one-class clusters (many
    CIFAR-10 classes carry the same label in both labellings). A label with fewer than C members
    is absent from some clusters."""
    labelings = G.table_for(G.E3A_LABELINGS, dataset, "E4b (combined shift)")[:2]
    out = []
    for g, (name, _, mapping) in enumerate(labelings):
        shares: list[dict[int, int]] = [{} for _ in range(c)]
        direction = 1 if g == 0 else -1
        for t in sorted(set(mapping)):
            members = [cls for cls in range(num_source_classes) if mapping[cls] == t]
            for j, cls in enumerate(members):
                shares[(t + direction * j) % c][cls] = t
        out += [(f"{name}/share{j}", _label_map(num_source_classes, m)) for j, m in enumerate(shares)]
    return out


def combined_shift(dataset: str, load: Loader, c: int = 2, clients: int = 20, seed: int = 0):
    """E4b: two concept groups (the two E3a labellings), each split into C subclass clusters (as
    E2a); the deal is `e4b_clusters`."""
    labelings = G.table_for(G.E3A_LABELINGS, dataset, "E4b (combined shift)")[:2]
    if c < 1:
        raise FedcondError(f"E4b needs C >= 1, got C={c}")
    n_clusters = 2 * c
    if clients < n_clusters or clients % n_clusters:
        raise FedcondError(
            f"E4b has {n_clusters} clusters: --clients must be a positive multiple of {n_clusters}, got {clients}"
        )
    data = load(dataset)
    C_src = len(data.classes)
    C = max(len(names) for _, names, _ in labelings)
    specs = [
        ClusterSpec(name, dataset, label_map, clients=clients // n_clusters)
        for name, label_map in e4b_clusters(dataset, c, C_src)
    ]
    names = tuple(f"label{i}" for i in range(C))
    return build("E4b", dataset, specs, {dataset: data}, C, seed, names, {"c": c, "clients": clients, "seed": seed})


from .domains import domain_split  # noqa: E402  (listed with the families below)
from .standard import dirichlet_label_skew, label_sorted_shards, pathological_label_skew, quantity_skew  # noqa: E402  (the standard partitions)


def _params(local_vars: dict) -> dict:
    return {k: v for k, v in local_vars.items() if k in ("k", "rotations", "clients_per_cluster", "seed")}


FAMILIES: dict[str, Callable] = {
    "E1": label_shift,
    "E2a": subclass_shift,
    "E2b": rotation_shift,
    "E3a": concept_shift,
    "E3b": label_permutation,
    "E4a": cross_dataset,
    "E4b": combined_shift,
    "domain": domain_split,  # JDFL (SPEC C.7): one domain per client
    # the standard partitions of personalised-FL papers (standard.py); clients counted in total
    "dirichlet": dirichlet_label_skew,
    "pathological": pathological_label_skew,
    "shards": label_sorted_shards,
    "quantity": quantity_skew,
}
# Families whose clients are counted in total (--clients), with the per-family parameters they take;
# a plug-in's partition (plugins.register_partition) joins them, so lists, not tuples.
STANDARD: list[str] = ["dirichlet", "pathological", "shards", "quantity"]
# Families whose clients have no true clusters (GroundTruth.known is False): no Oracle, no ARI.
CLUSTERLESS: list[str] = ["dirichlet", "shards"]
# The partitions plug-ins registered (name -> the user's function); their builders are in FAMILIES.
USER_PARTITIONS: dict[str, Callable] = {}
# Called with (name, clustered) when a partition registers: the experiment registry names its
# cells this way (experiments.py appends itself, so the plug-in API need not import it).
ON_PARTITION: list[Callable[[str, bool], None]] = []
