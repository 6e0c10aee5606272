from collections import Counter

import numpy as np
import pytest
import torch

from fedcond_testing import sample_ids
from fedcond.errors import FedcondError
from fedcond.scenarios import FAMILIES, make_scenario
from fedcond.scenarios import groupings as G
from fedcond.scenarios.partition import rotate

PER_CLUSTER_FAMILIES = [("E1", {"k": 5}), ("E2a", {"k": 2}), ("E3a", {"k": 2}), ("E3b", {"k": 3}), ("E2b", {"rotations": "C3"})]


@pytest.mark.parametrize("family,kw", PER_CLUSTER_FAMILIES)
def test_clients_disjoint_and_union_is_what_the_family_uses(tagged, family, kw):
    sc = make_scenario(family, "mnist", tagged, clients_per_cluster=3, seed=1, **kw)
    data = tagged("mnist")
    for split, y_src in (("train", data.y_train), ("test", data.y_test)):
        offset = 0 if split == "train" else 50_000
        ids = [i for j, c in enumerate(sc.federation.clients) for i in sample_ids(rotate_back(sc, j, split))]
        assert len(ids) == len(set(ids)), "a sample is held by two clients"
        used_classes = {cls for spec_cls in cluster_classes(family, kw) for cls in spec_cls}
        expected = {i + offset for i in np.flatnonzero(np.isin(y_src, list(used_classes)))}
        assert set(ids) == expected


def cluster_classes(family, kw):
    if family == "E1":
        return G.E1_SEMANTIC["mnist"][kw["k"]]
    if family == "E2a":
        return [m for _, m in G.E2A_SUPERCLASSES["mnist"]]
    return [tuple(range(10))]


def rotate_back(sc, i, split):
    x = getattr(sc.federation.clients[i], f"x_{split}")
    if sc.federation.family != "E2b":
        return x
    return rotate(x, -G.ROTATIONS["C3"][sc.truth.cluster[i]] % 360)


@pytest.mark.parametrize("family,kw", PER_CLUSTER_FAMILIES)
def test_test_labels_follow_the_cluster(tagged, family, kw):
    sc = make_scenario(family, "mnist", tagged, clients_per_cluster=3, seed=0, **kw)
    for k in range(sc.truth.num_clusters):
        members = [c for c, ck in zip(sc.federation.clients, sc.truth.cluster) if ck == k]
        train_labels = set(torch.cat([c.y_train for c in members]).tolist())
        assert set(torch.cat([c.y_test for c in members]).tolist()) == train_labels
        for c in members:
            assert set(c.y_test.tolist()) <= train_labels


def test_same_seed_same_split_other_seed_other_split(tagged):
    a = make_scenario("E1", "mnist", tagged, k=2, clients_per_cluster=4, seed=3)
    b = make_scenario("E1", "mnist", tagged, k=2, clients_per_cluster=4, seed=3)
    c = make_scenario("E1", "mnist", tagged, k=2, clients_per_cluster=4, seed=4)
    assert all(torch.equal(x.x_train, y.x_train) and torch.equal(x.y_test, y.y_test) for x, y in zip(a.federation.clients, b.federation.clients))
    assert any(sample_ids(x.x_train) != sample_ids(y.x_train) for x, y in zip(a.federation.clients, c.federation.clients))


def test_sparsity_keeps_total_and_divides_evenly(tagged):
    rich = make_scenario("E1", "mnist", tagged, k=2, clients_per_cluster=5)
    sparse = make_scenario("E1", "mnist", tagged, k=2, clients_per_cluster=20)
    assert rich.federation.sizes().sum() == sparse.federation.sizes().sum() == 600
    assert sparse.federation.sizes().max() - sparse.federation.sizes().min() <= 1


def test_e1_clusters_see_only_their_group(tagged):
    sc = make_scenario("E1", "mnist", tagged, k=5, clients_per_cluster=2)
    for c, k in zip(sc.federation.clients, sc.truth.cluster):
        assert set(c.y_train.tolist()) == set(G.E1_SEMANTIC["mnist"][5][k])
    assert sc.federation.num_classes == 10


def test_e2a_same_task_labels_disjoint_members(tagged):
    sc = make_scenario("E2a", "mnist", tagged, k=2, clients_per_cluster=2)
    assert sc.federation.num_classes == 2
    data = tagged("mnist")
    seen = {}
    for c, k in zip(sc.federation.clients, sc.truth.cluster):
        assert set(c.y_train.tolist()) == {0, 1}  # both superclasses in every cluster
        src = {int(data.y_train[i]) for i in sample_ids(c.x_train)}
        seen.setdefault(int(k), set()).update(src)
    assert not (seen[0] & seen[1])  # member classes are divided, not shared


def test_e3b_permutations_distinct_and_cluster0_identity(tagged):
    sc = make_scenario("E3b", "mnist", tagged, k=4, clients_per_cluster=1, seed=0)
    data = tagged("mnist")
    perms = []
    for c in sc.federation.clients:
        mapping = {int(data.y_train[i]): int(t) for i, t in zip(sample_ids(c.x_train), c.y_train.tolist())}
        perms.append(tuple(mapping[k] for k in range(10)))
    assert perms[0] == tuple(range(10))
    assert len(set(perms)) == 4 and all(sorted(p) == list(range(10)) for p in perms)


def test_e4a_and_e4b_count_clients_in_total(tagged):
    sc = make_scenario("E4a", "mnist", tagged, clients=10)
    assert sc.federation.num_clients == 10 and sorted(Counter(sc.truth.cluster.tolist()).values()) == [5, 5]
    sc = make_scenario("E4b", "mnist", tagged, k=2, clients=20)
    assert sc.truth.num_clusters == 4 and sc.federation.num_clients == 20


@pytest.mark.parametrize(
    "family,kw,msg",
    [
        ("E1", {"k": 11}, "K"),
        ("E2a", {"k": 6}, "K"),
        ("E3a", {"k": 3}, "labellings"),
        ("E1", {"k": 2, "clients_per_cluster": 400}, "fewer than"),
        ("E9", {}, "unknown scenario family"),
        ("E2b", {"rotations": "C9"}, "rotation"),
        ("E4b", {"clients": 7}, "multiple of 4"),
    ],
)
def test_impossible_requests_are_refused(tagged, family, kw, msg):
    with pytest.raises(FedcondError, match=msg):
        make_scenario(family, "mnist", tagged, **kw)


def test_every_family_builds(tagged):
    for family in FAMILIES:
        if family == "domain":  # multi-domain datasets only: tests/jdfl/test_domains_and_experiments.py
            continue
        total = family in ("E4a", "E4b", "dirichlet", "pathological", "shards", "quantity")  # clients in total
        sc = make_scenario(family, "mnist", tagged, **({"clients": 8} if total else {"clients_per_cluster": 2}))
        assert sc.federation.num_clients == len(sc.truth.cluster) > 0


# ---- on real MNIST samples ---------------------------------------------------------------------


def test_rotations_on_real_mnist(mnist):
    load = lambda name: mnist  # noqa: E731
    sc = make_scenario("E2b", "mnist", load, rotations="C1", clients_per_cluster=2, seed=0)
    src = torch.from_numpy(mnist.x_train)
    by_image = {bytes(src[i].numpy().tobytes()): i for i in range(len(src))}
    for c, k in zip(sc.federation.clients, sc.truth.cluster):
        x = c.x_train[:50]
        back = torch.rot90(x, k=2, dims=(2, 3)) if k == 1 else x  # C1: cluster 1 is rotated by 180 degrees
        for img, label in zip(back, c.y_train[:50]):
            i = by_image[bytes(img[0].numpy().tobytes())]
            assert mnist.y_train[i] == label


def test_relabelling_on_real_mnist(mnist):
    load = lambda name: mnist  # noqa: E731
    sc = make_scenario("E3a", "mnist", load, k=2, clients_per_cluster=2, seed=0)
    src = torch.from_numpy(mnist.x_test)
    by_image = {bytes(src[i].numpy().tobytes()): i for i in range(len(src))}
    labelings = G.E3A_LABELINGS["mnist"]
    for c, k in zip(sc.federation.clients, sc.truth.cluster):
        for img, label in zip(c.x_test[:100], c.y_test[:100]):
            digit = int(mnist.y_test[by_image[bytes(img[0].numpy().tobytes())]])
            expected = digit % 2 if k == 0 else int(digit >= 5)  # odd/even, then below-5 / 5-and-above
            assert labelings[k][2][digit] == expected == label


def test_non_right_angle_rotation_keeps_shape_and_mass():
    x = torch.zeros(1, 1, 28, 28, dtype=torch.uint8)
    x[0, 0, 10:18, 10:18] = 200
    r = rotate(x, 10.0)
    assert r.shape == x.shape and r.dtype == torch.uint8
    assert abs(int(r.sum()) - int(x.sum())) / int(x.sum()) < 0.05
    assert not torch.equal(r, x)


def test_no_two_e4b_clusters_are_the_same_in_any_registered_setting(tagged):
    from fedcond.experiments import EXPERIMENTS
    from fedcond.scenarios.families import e4b_clusters

    settings = {(e.dataset, e.k) for e in EXPERIMENTS.values() if e.family == "E4b"}
    assert ("cifar10", 4) in settings
    for dataset, c in settings:
        maps = [m for _, m in e4b_clusters(dataset, c)]
        assert len(maps) == 2 * c and len(set(maps)) == len(maps), (dataset, c)
        assert all(any(t >= 0 for t in m) for m in maps), (dataset, c)  # no empty cluster
    sc = make_scenario("E4b", "cifar10", tagged, k=4, clients=8)  # the deal builds: one client per cluster
    assert sc.truth.num_clusters == 8 and all(c.n_train > 0 for c in sc.federation.clients)
