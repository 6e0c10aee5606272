"""Synthetic clustered federations for the earlier study (SPEC Part B): linear and logistic regression.

The sources give few details; this is our design, chosen so that the cluster is identifiable from
the covariance (the eigenvector statistic carries it) and the cluster oracle's RMSE is about 0.1.

K clusters of `clients_per_cluster` clients, D = `features` inputs. Cluster k has
- a direction u_k (unit, [D]): u_1..u_K are orthonormal (so K <= D), drawn uniformly at random one
  after another (each in the orthogonal complement of the previous ones) and redrawn until its
  largest |entry| beats the second largest by `SIGN_MARGIN`, so the statistic's sign convention
  (largest entry positive) is unambiguous for every client's estimate; stored sign-fixed;
- an input distribution x ~ N(0, Sigma_k), Sigma_k = I + (spike - 1) u_k u_k^T: variance `spike`
  along u_k, 1 in every other direction, so u_k is Sigma_k's leading eigenvector with the
  eigenvalue gap spike - 1 (default 16: standard deviation 4 along u_k);
- true weights w_k ~ N(0, I / D) ([D]; |w_k| is about 1), no intercept.

Targets, given x of a client of cluster k:
- linreg:  y = x^T w_k + noise * e,   e ~ N(0, 1). With noise = 0.1 the oracle (one least-squares
  model per cluster, on the cluster's 100 x 50 samples) reaches a test RMSE of 0.1 (it can do no
  better: 0.1 is the noise floor; least-squares oracle measured 0.099-0.101 over seeds 0-4, 3 and 8 clusters);
- logreg:  y ~ Bernoulli(sigmoid(x^T w_k / noise)), i.e. y = 1[x^T w_k + noise * e > 0] with e
  standard logistic: the same noise scale turned into label noise. With noise = 0.1 the Bayes
  classifier 1[x^T w_k > 0] scores 0.95-0.97 (seeds 0-4).

Every client draws `samples_per_client` samples; the first (1 - test_fraction) of them are its
training split, the rest its test split (default 50 / 50). Deterministic given `seed`; each
purpose (directions, weights, inputs, noise) has its own random stream.

Why these numbers: with 50 training samples, a leading-eigenvector estimate errs by about
sqrt(spike / ((spike - 1)^2 n)) = 0.04 per entry, well inside both the angle between clusters
(90 degrees) and the sign margin (0.25), so k-means on the statistic recovers the clusters exactly.

Dimension letters: N clients, n samples of one client, D features, K clusters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedcond.errors import FedcondError

from .statistic import fix_sign

TASKS = ("linreg", "logreg")
SIGN_MARGIN = 0.25  # min gap between the largest and second-largest |entry| of each cluster direction
_STREAMS = {"directions": 1, "weights": 2, "inputs": 3, "noise": 4}  # purpose -> stream id


def _rng(seed: int, purpose: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([0x5E7, int(seed), _STREAMS[purpose]]))


@dataclass(frozen=True, eq=False)
class SyntheticFederation:
    """Clients' data (float64) and the ground truth that made it."""

    task: str
    x_train: np.ndarray  # [N, n_tr, D]
    y_train: np.ndarray  # [N, n_tr]  (regression targets, or 0/1 labels as floats)
    x_test: np.ndarray  # [N, n_te, D]
    y_test: np.ndarray  # [N, n_te]
    cluster: np.ndarray  # [N] int64, the true cluster of each client
    directions: np.ndarray  # [K, D] the u_k, sign-fixed
    weights: np.ndarray  # [K, D] the w_k
    params: dict = field(default_factory=dict)  # generate()'s arguments

    @property
    def num_clients(self) -> int:
        return len(self.cluster)

    @property
    def num_clusters(self) -> int:
        return len(self.directions)

    @property
    def features(self) -> int:
        return self.x_train.shape[-1]

    def true_output(self, split: str = "test") -> np.ndarray:
        """x^T w_k of every sample, [N, n]: the noiseless regression target / the true logit (times noise)."""
        x = self.x_test if split == "test" else self.x_train
        return np.einsum("Nnd,Nd->Nn", x, self.weights[self.cluster])

    def bayes_per_client(self) -> np.ndarray:
        """What the true model scores on each client's test split, [N]: RMSE of x^T w_k (the noise
        floor) for linreg, accuracy of 1[x^T w_k > 0] for logreg."""
        f = self.true_output("test")
        if self.task == "linreg":
            return np.sqrt(((f - self.y_test) ** 2).mean(axis=1))
        return ((f > 0) == (self.y_test > 0.5)).mean(axis=1)

    def __repr__(self) -> str:
        return (
            f"SyntheticFederation({self.task}: {self.num_clusters} clusters, {self.num_clients} clients, "
            f"train {self.x_train.shape[1]} / test {self.x_test.shape[1]} samples each, D={self.features})"
        )


def cluster_directions(
    clusters: int, features: int, rng: np.random.Generator, margin: float = SIGN_MARGIN, tries: int = 2000
) -> np.ndarray:
    """K orthonormal, sign-fixed directions [K, D], each with a sign margin of at least `margin`."""
    if clusters > features:
        raise FedcondError(
            f"the generator needs clusters <= features for orthonormal cluster directions "
            f"(got {clusters} clusters, {features} features)"
        )
    for _ in range(100):  # a whole new frame when a late direction finds no room for the margin
        u = np.zeros((0, features))
        for _k in range(clusters):
            for _t in range(tries):
                g = rng.standard_normal(features)
                g -= u.T @ (u @ g)  # into the orthogonal complement of the directions so far
                g /= np.linalg.norm(g)
                top = np.sort(np.abs(g))[::-1]
                if top[0] - (top[1] if features > 1 else 0.0) >= margin:
                    u = np.vstack([u, g])
                    break
            else:
                break
        if len(u) == clusters:
            return fix_sign(u)
    raise FedcondError(
        f"could not draw {clusters} orthonormal directions in {features} dimensions with "
        f"sign margin {margin}; lower the margin"
    )


def generate(
    task: str,
    clusters: int,
    clients_per_cluster: int = 100,
    features: int = 10,
    samples_per_client: int = 100,
    test_fraction: float = 0.5,
    noise: float = 0.1,
    spike: float = 16.0,
    seed: int = 0,
) -> SyntheticFederation:
    """A clustered federation for `task` ('linreg' or 'logreg'), as the module docstring describes.

    Clients are ordered by cluster (client i is in cluster i // clients_per_cluster).
    """
    if task not in TASKS:
        raise FedcondError(f"unknown synthetic task '{task}'; choose {' or '.join(TASKS)}")
    if clusters < 1 or clients_per_cluster < 1 or features < 1:
        raise FedcondError("clusters, clients_per_cluster and features must be positive")
    n_test = int(round(samples_per_client * test_fraction))
    n_train = samples_per_client - n_test
    if n_train < 2 or n_test < 1:
        raise FedcondError(
            f"samples_per_client={samples_per_client} with test_fraction={test_fraction} leaves "
            f"{n_train} training and {n_test} test samples per client (need >= 2 and >= 1)"
        )
    if spike <= 1.0 or noise <= 0.0:
        raise FedcondError("spike must exceed 1 (the leading eigenvalue) and noise must be positive")
    params = dict(
        task=task,
        clusters=clusters,
        clients_per_cluster=clients_per_cluster,
        features=features,
        samples_per_client=samples_per_client,
        test_fraction=test_fraction,
        noise=noise,
        spike=spike,
        seed=seed,
        sign_margin=SIGN_MARGIN,
    )

    u = cluster_directions(clusters, features, _rng(seed, "directions"))  # [K, D]
    w = _rng(seed, "weights").standard_normal((clusters, features)) / np.sqrt(features)  # [K, D]
    cluster = np.repeat(np.arange(clusters), clients_per_cluster)  # [N]
    n_clients = len(cluster)

    # x = z + (sqrt(spike) - 1) (u_k^T z) u_k, z ~ N(0, I): covariance I + (spike - 1) u_k u_k^T
    z = _rng(seed, "inputs").standard_normal((n_clients, samples_per_client, features))  # [N, n, D]
    uc = u[cluster]  # [N, D]
    x = z + (np.sqrt(spike) - 1.0) * np.einsum("Nnd,Nd->Nn", z, uc)[..., None] * uc[:, None, :]  # [N, n, D]
    f = np.einsum("Nnd,Nd->Nn", x, w[cluster])  # [N, n] noiseless x^T w_k
    noise_rng = _rng(seed, "noise")
    if task == "linreg":
        y = f + noise * noise_rng.standard_normal(f.shape)
    else:
        p = 1.0 / (1.0 + np.exp(-f / noise))
        y = (noise_rng.random(f.shape) < p).astype(np.float64)
    part = lambda a, s: np.ascontiguousarray(a[:, s])  # noqa: E731
    return SyntheticFederation(
        task=task,
        x_train=part(x, slice(0, n_train)),
        y_train=part(y, slice(0, n_train)),
        x_test=part(x, slice(n_train, None)),
        y_test=part(y, slice(n_train, None)),
        cluster=cluster,
        directions=u,
        weights=w,
        params=params,
    )
