
import numpy as np
import pytest
import torch

from fedcond import stats as S
from fedcond.errors import FedcondError


def numpy_top(z: np.ndarray, l: int) -> np.ndarray:
    vals = np.sort(np.linalg.eigvalsh(np.cov(z, rowvar=False)))[::-1]
    out = np.zeros(l)
    out[: min(l, len(vals))] = vals[:l]
    return out


@pytest.mark.parametrize("n,d,l", [(200, 20, 8), (500, 40, 32), (100, 794, 32)])
def test_exact_equals_numpy(n, d, l):
    rng = np.random.default_rng(0)
    z = rng.normal(size=(n, d)) * rng.uniform(0.1, 3, size=d)
    got = S.top_eigenvalues(torch.from_numpy(z), l)
    np.testing.assert_allclose(got, numpy_top(z, l), rtol=1e-8, atol=1e-10)


def test_randomized_matches_exact_on_a_decaying_spectrum():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(2000, 100)) * (0.8 ** np.arange(100))  # decaying spectrum: randomised SVD's home ground
    exact = S.top_eigenvalues(torch.from_numpy(z), 8)
    approx = S.top_eigenvalues(torch.from_numpy(z), 8, method="randomized")
    np.testing.assert_allclose(approx, exact, rtol=1e-3)


def test_invariant_to_sample_order():
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.integers(0, 256, size=(300, 1, 28, 28), dtype=np.uint8))
    y = torch.from_numpy(rng.integers(0, 10, size=300))
    perm = torch.from_numpy(rng.permutation(300))
    a = S.client_statistics([x], [y], 10)
    b = S.client_statistics([x[perm]], [y[perm]], 10)
    np.testing.assert_allclose(a, b, rtol=1e-9)


def test_labels_enter_the_spectrum():
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.integers(0, 256, size=(400, 1, 28, 28), dtype=np.uint8))
    one_class = torch.zeros(400, dtype=torch.int64)
    two_classes = torch.arange(400) % 2
    a, b = S.client_statistics([x, x], [one_class, two_classes], 10)
    assert not np.allclose(a, b)


def test_pads_with_zeros_and_warns_when_too_few_samples():
    z = torch.randn(10, 50, dtype=torch.float64)
    with pytest.warns(UserWarning, match="padding"):
        vals = S.top_eigenvalues(z, 32)
    assert vals.shape == (32,) and np.all(vals[9:] == 0) and np.all(vals[:9] > 0)
    with pytest.warns(UserWarning):
        assert np.all(S.top_eigenvalues(torch.randn(1, 5, dtype=torch.float64), 4) == 0)


def test_pads_when_d_below_l():
    with pytest.warns(UserWarning):
        vals = S.top_eigenvalues(torch.randn(100, 5, dtype=torch.float64), 8)
    assert np.all(vals[5:] == 0) and np.all(vals[:5] > 0)


def test_zscore_and_log():
    raw = np.array([[4.0, 1.0, 0.0], [2.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    z = S.normalise(raw, "zscore")
    np.testing.assert_allclose(z[:, 0], [1.2247448714, 0.0, -1.2247448714])
    assert np.all(z[:, 1:] == 0)  # constant components become 0, not NaN
    np.testing.assert_allclose(S.normalise(raw, "log"), np.log1p(raw))
    with pytest.raises(FedcondError):
        S.normalise(raw, "bogus")


def test_differ_between_clusters_of_different_label_sets(mnist):
    """Real MNIST: clients of E1 clusters {0..4} vs {5..9} are told apart by their eigenvalues alone."""
    from fedcond.scenarios import make_scenario

    sc = make_scenario("E1", "mnist", lambda n: mnist, k=2, clients_per_cluster=5, seed=0)
    fed = sc.federation
    raw = S.client_statistics([c.x_train for c in fed.clients], [c.y_train for c in fed.clients], 10)
    z = S.normalise(raw)
    # nearest neighbour (excluding self) is always in the same cluster
    dist = ((z[:, None, :] - z[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(dist, np.inf)
    assert np.all(sc.truth.cluster[dist.argmin(1)] == sc.truth.cluster)
    # and clients of different clusters are much farther apart than clients of one cluster
    same = sc.truth.cluster[:, None] == sc.truth.cluster[None, :]
    np.fill_diagonal(dist, np.nan)
    assert np.nanmean(dist[~same]) > 2 * np.nanmean(dist[same])  # measured: 99.4 vs 35.7 at seed 0


def test_random_control_statistic_depends_on_seed_and_client_id_only():
    from fedcond import stats as S

    a = S.random_vectors([0, 1, 2], 32, seed=0)
    assert a.shape == (3, 32) and np.array_equal(a, S.random_vectors([0, 1, 2], 32, seed=0))
    assert not np.array_equal(a, S.random_vectors([0, 1, 2], 32, seed=1)) and not np.allclose(a[0], a[1])
    assert np.array_equal(S.random_vectors([2], 32, seed=0)[0], a[2])  # one client's vector ignores the others


def test_protocol_statistic_random_reaches_the_model_z_scored(tagged):
    from fedcond.protocol import PAPER
    from fedcond.scenarios import make_scenario
    from fedcond.client_stats import client_statistics

    sc = make_scenario("E1", "mnist", tagged, k=2, clients_per_cluster=3, seed=0)
    raw, s = client_statistics(sc, PAPER.replace(statistic="random"), seed=4)
    assert raw.shape == (6, 32) and torch.allclose(s.mean(0), torch.zeros(32), atol=1e-5)
    with pytest.raises(FedcondError, match="unknown statistic"):
        PAPER.replace(statistic="nope")


def _client(seed=0, n=120):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 1, 28, 28), generator=g, dtype=torch.uint8)
    y = torch.randint(0, 10, (n,), generator=g)
    return x, y


def _eigen(x, y):
    return S.client_statistics([x], [y], 10)[0]


def _means(x, y):
    return S.class_means(S.pixel_features(x), y, 10)


def test_eigenvalues_cannot_see_a_label_permutation_and_class_means_can():
    """E3b's shift is an orthogonal change of basis of the one-hot block: the spectrum is unchanged."""
    x, y = _client()
    perm = torch.tensor([3, 7, 0, 9, 1, 5, 2, 8, 6, 4])
    assert np.allclose(_eigen(x, perm[y]), _eigen(x, y), rtol=1e-10, atol=1e-10)
    assert not np.allclose(_means(x, perm[y]), _means(x, y), atol=1e-3)


@pytest.mark.parametrize("quarter_turns", [1, 2])
def test_eigenvalues_cannot_see_a_rotation_by_90_or_180_degrees_and_class_means_can(quarter_turns):
    """A rotation by a multiple of 90 degrees permutes the pixels: an orthogonal change of basis of phi."""
    x, y = _client(1)
    turned = torch.rot90(x, quarter_turns, dims=(2, 3))
    assert np.allclose(_eigen(turned, y), _eigen(x, y), rtol=1e-10, atol=1e-10)
    assert not np.allclose(_means(turned, y), _means(x, y), atol=1e-3)


def test_class_means_width_is_at_least_the_eigenvalues_for_few_labels():
    """3 projections a class for 10 labels (40 numbers); a binary task gets 15 (32), a ternary one 10 (33)."""
    assert [S.class_means_projections(c) for c in (2, 3, 10, 100)] == [15, 10, 3, 3]
    assert [S.statistic_dim("class_means", 32, c) for c in (2, 3, 10)] == [32, 33, 40]
    x, y = _client(3)
    rows = S.STATISTICS["class_means"].compute([x], [(y >= 5).long()], [0], 2, 32, S.pixel_features, "exact", 0)
    assert rows.shape == (1, 32)
    expected = S.pixel_features(x)[y >= 5].mean(0) @ S.public_projection(784, 15)
    assert np.allclose(rows[0, 2 + 15:], expected.numpy())  # label 1's mean, after the 2 frequencies and label 0's


def test_class_means_layout_and_a_missing_class():
    x, y = _client(2)
    y = torch.where(y == 4, torch.zeros_like(y), y)  # no class 4 here
    v = _means(x, y)
    assert v.shape == (S.statistic_dim("class_means", 32, 10),) == (40,)
    assert np.isclose(v[:10].sum(), 1.0) and v[4] == 0.0
    m = S.PROJECTIONS_PER_CLASS
    assert np.all(v[10 + 4 * m: 10 + 5 * m] == 0.0)  # the missing class's projected mean
    expected = S.pixel_features(x)[y == 7].mean(0) @ S.public_projection(784)
    assert np.allclose(v[10 + 7 * m: 10 + 8 * m], expected.numpy())
    assert torch.equal(S.public_projection(784), S.public_projection(784))  # public: the same basis everywhere
