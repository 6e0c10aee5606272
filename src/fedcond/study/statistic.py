"""The earlier study's conditioning statistic (SPEC Part B): each client's leading PCA eigenvectors.

Client i centres its own inputs x (never the labels, unlike SPEC A.2), takes the sample
covariance and keeps its first n_c eigenvectors, by decreasing eigenvalue. The vector mu_i that
conditions the models is their concatenation, [n_c * D] (D: input width). It is computed once,
locally, from the client's training split only.

Sign convention. An eigenvector is defined only up to sign (v and -v are both eigenvectors, and
which one a solver returns is arbitrary), so every eigenvector is flipped until **its entry of
largest absolute value is positive** (ties: the first such entry). This is scikit-learn's
`svd_flip` rule. It depends on the covariance alone, so mu_i does not change when the data are
negated (x -> -x), reordered, or decomposed by another solver. Any sign rule is discontinuous
somewhere (here: where two entries tie in absolute value); the synthetic generator keeps every
cluster's direction away from that set (see `generator.SIGN_MARGIN`).

Dimension letters: N clients, n samples of one client, D input width, c = n_c eigenvectors.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

DEFAULT_NUM_EIGENVECTORS = 1  # the study conditions on the first eigenvector (EMNIST: up to 8)


def fix_sign(vectors: np.ndarray | torch.Tensor) -> np.ndarray:
    """Flip each row of [..., D] so that its entry of largest absolute value is positive.

    Zero rows stay zero. Deterministic: among entries of equal magnitude the first decides.
    """
    v = np.array(vectors, dtype=np.float64, copy=True)
    if v.shape[-1] == 0:
        return v
    pivot = np.take_along_axis(v, np.abs(v).argmax(axis=-1)[..., None], axis=-1)  # [..., 1]
    return v * np.where(pivot < 0, -1.0, 1.0)


def leading_eigenvectors(
    x: np.ndarray | torch.Tensor, n_c: int = DEFAULT_NUM_EIGENVECTORS, tol: float = 1e-10
) -> np.ndarray:
    """The first n_c eigenvectors [c, D] of the sample covariance of x [n, D], sign-fixed.

    Computed by an SVD of the centred data (exact; works for n < D). Directions that do not exist
    (n - 1 or D smaller than n_c, or zero variance) come back as zero rows, with a warning.
    """
    x = torch.as_tensor(np.asarray(x), dtype=torch.float64).reshape(len(x), -1)  # [n, D]
    n, d = x.shape
    out = np.zeros((n_c, d))
    if n >= 2:
        xc = x - x.mean(dim=0, keepdim=True)  # [n, D]
        _, sing, vh = torch.linalg.svd(xc, full_matrices=False)  # sing [r] descending, vh [r, D]
        keep = int((sing > tol * max(float(sing[0]), 1.0)).sum()) if len(sing) else 0
        m = min(n_c, keep)
        out[:m] = fix_sign(vh[:m].numpy())
    else:
        m = 0
    if m < n_c:
        warnings.warn(
            f"eigenvector statistic: only {m} of {n_c} eigenvectors exist (n={n}, D={d}); padding with zero rows",
            stacklevel=2,
        )
    return out


def eigvec_statistic(x: np.ndarray | torch.Tensor, n_c: int = DEFAULT_NUM_EIGENVECTORS) -> np.ndarray:
    """mu for one client: its first n_c sign-fixed eigenvectors, concatenated, [n_c * D]."""
    return leading_eigenvectors(x, n_c).reshape(-1)


def client_statistics(xs, n_c: int = DEFAULT_NUM_EIGENVECTORS) -> np.ndarray:
    """mu of every client, [N, n_c * D]; row i uses client i's data alone."""
    rows = [eigvec_statistic(x, n_c) for x in xs]
    return np.stack(rows) if rows else np.zeros((0, 0))


def cluster_ari(stats: np.ndarray, clusters: np.ndarray, seed: int = 0) -> float:
    """Adjusted Rand index of k-means (true number of clusters, 10 restarts) on the statistics
    against the true clusters: 1.0 when the statistic identifies every client's cluster."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    k = len(np.unique(clusters))
    if k < 2:
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn's threadpool / convergence chatter on tiny inputs
        pred = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(stats)
    return float(adjusted_rand_score(clusters, pred))
