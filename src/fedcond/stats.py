"""Client statistics (SPEC A.2): the top-l PCA eigenvalues of each client's [phi(x), onehot(y)].

Each client computes its vector once, locally. Only eigenvalues are kept, never eigenvectors.
Normalisation across clients comes in two forms:
- `zscore`: the paper's per-component z-score over all clients (needs population mean/std);
- `log`: a fixed per-client transform, log(1 + eigenvalue), which reveals nothing and needs no
  coordination, for deployments without secure aggregation.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from .errors import FedcondError
from .plugin_loading import load_entry_points

DEFAULT_NUM_EIGENVALUES = 32  # SPEC A.2: l = 32 (l = 8 gave similar results)


def pixel_features(x: torch.Tensor) -> torch.Tensor:
    """phi for 28x28 data: identity on the flattened pixels, scaled to [0, 1]. uint8 [n,C,H,W] -> [n, C*H*W]."""
    return x.reshape(x.shape[0], -1).to(torch.float64) / 255.0


def design_matrix(features: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Z = [phi(x), onehot(y)]: labels are inside on purpose, so label and concept shift show in the spectrum."""
    onehot = torch.nn.functional.one_hot(labels.to(torch.int64), num_classes).to(torch.float64)  # [n, C]
    return torch.cat([features.to(torch.float64), onehot], dim=1)  # [n, d]


def top_eigenvalues(
    z: torch.Tensor, l: int = DEFAULT_NUM_EIGENVALUES, method: str = "exact", seed: int = 0
) -> np.ndarray:
    """Top-l eigenvalues (descending) of the sample covariance of z [n, d], zero-padded to l.

    exact: the d x d covariance and a symmetric eigensolver; exact, and fastest for moderate d.
    randomized: scikit-learn's randomised SVD of the centred data, O(n d l); for large d.
    """
    n, d = z.shape
    if n < 2:
        vals = np.zeros(0)
    elif method == "exact":
        zc = z - z.mean(dim=0, keepdim=True)
        cov = zc.T @ zc / (n - 1)  # [d, d]
        vals = torch.linalg.eigvalsh(cov).flip(0).clamp_min(0).numpy()
    elif method == "randomized":
        from sklearn.utils.extmath import randomized_svd

        zc = (z - z.mean(dim=0, keepdim=True)).numpy()
        k = min(l, n, d)
        _, sing, _ = randomized_svd(zc, n_components=k, n_iter=7, random_state=seed)
        vals = sing**2 / (n - 1)
    else:
        raise FedcondError(f"unknown eigenvalue method '{method}'; choose exact or randomized")
    rank_cap = min(n - 1, d) if n >= 2 else 0  # a centred n x d matrix has at most min(n-1, d) non-zero eigenvalues
    if rank_cap < l:
        warnings.warn(
            f"client statistics: only {rank_cap} eigenvalues exist (n={n}, d={d}); padding to l={l} with zeros",
            stacklevel=2,
        )
    out = np.zeros(l)
    m = min(l, len(vals), rank_cap)
    out[:m] = vals[:m]
    return out


def client_statistics(
    xs: list[torch.Tensor],
    ys: list[torch.Tensor],
    num_classes: int,
    l: int = DEFAULT_NUM_EIGENVALUES,
    phi: Callable[[torch.Tensor], torch.Tensor] = pixel_features,
    method: str = "exact",
) -> np.ndarray:
    """Raw eigenvalue vectors of every client: [num_clients, l]. Each row uses only that client's data."""
    rows = [top_eigenvalues(design_matrix(phi(x), y, num_classes), l, method) for x, y in zip(xs, ys)]
    return np.stack(rows) if rows else np.zeros((0, l))


def random_vectors(client_ids: list[int], l: int, seed: int) -> np.ndarray:
    """The control statistic: one standard-normal vector per client, drawn from (seed, client id)
    alone; it uses no data, so it can only serve as a client fingerprint [N, l]."""
    rows = [
        np.random.default_rng(np.random.SeedSequence([0xF1A6, seed, int(i)])).standard_normal(l) for i in client_ids
    ]
    return np.stack(rows) if rows else np.zeros((0, l))


PROJECTION_SEED = 0xC1A55  # public: every client (a newcomer too) draws the same basis
PROJECTIONS_PER_CLASS = 3  # the least; a task with few labels gets more (class_means_projections)


def class_means_projections(num_classes: int, l: int = DEFAULT_NUM_EIGENVALUES) -> int:
    """Projections of each class mean: 3, or as many as make the statistic at least l numbers wide (the
    paper's eigenvalue width, so the model grows as SPEC says): 10 labels get 3 (40 numbers), a binary
    task (E2a, E3a on MNIST/FMNIST) 15 (32 numbers), a ternary one 10.

    Why (issue 45, stop 67): with 3 a binary task's statistic is 8 numbers, and at super sparse (~300
    samples a client) some clients' statistics sit between the clusters: on E3a FMNIST K=2 super sparse,
    seed 0, a logistic regression on the training clients' statistics gives one newcomer P(own cluster)
    .74 (training clients' lowest, cross-validated, .43); with 15, .99 (lowest .98)."""
    return max(PROJECTIONS_PER_CLASS, -(-l // num_classes) - 1)


def public_projection(d: int, m: int = PROJECTIONS_PER_CLASS) -> torch.Tensor:
    """A fixed, public random basis [d, m] (Gaussian, scaled by 1/sqrt(d)), the same on every client."""
    g = torch.Generator().manual_seed(PROJECTION_SEED + d)
    return torch.randn(d, m, generator=g, dtype=torch.float64) / d**0.5


def class_means(
    features: torch.Tensor, labels: torch.Tensor, num_classes: int, m: int = PROJECTIONS_PER_CLASS
) -> np.ndarray:
    """The class-means statistic of one client: its label frequencies (C values), then each class's
    mean feature vector projected onto the public basis (C x m values), in label order; a class the
    client does not hold gives zeros. [C * (1 + m)].

    Why: the eigenvalues of [phi(x), onehot(y)] cannot tell clusters apart whose data differ by an
    orthogonal change of basis (a label permutation, E3b; a pixel permutation such as a rotation by
    a multiple of 90 degrees, E2b) or by a mean shift (the covariance is centred). Class means in
    label order move under all three. Cost: one pass over the data, fixed size, local."""
    f = features.to(torch.float64)
    y = labels.to(torch.int64)
    counts = torch.bincount(y, minlength=num_classes).to(torch.float64)  # [C]
    sums = torch.zeros(num_classes, f.shape[1], dtype=torch.float64).index_add_(0, y, f)  # [C, d]
    means = sums / counts.clamp_min(1)[:, None]
    projected = means @ public_projection(f.shape[1], m)  # [C, m]
    return torch.cat([counts / max(1, len(y)), projected.flatten()]).numpy()


@dataclass(frozen=True)
class Statistic:
    """One statistic a conditioned model may receive: what it is, its width, how a client computes it."""

    description: str
    dim: Callable[[int, int], int]  # (l = num_eigenvalues, C = num_classes) -> its width
    compute: Callable[..., np.ndarray]  # (xs, ys, ids, num_classes, l, phi, method, seed) -> [N, dim]
    uses_data: bool = True  # False: the control, which needs no feature map phi


def _eigenvalue_rows(xs, ys, ids, num_classes, l, phi, method, seed):
    return client_statistics(xs, ys, num_classes, l=l, phi=phi, method=method)


def _class_mean_rows(xs, ys, ids, num_classes, l, phi, method, seed):
    m = class_means_projections(num_classes, l)
    rows = [class_means(phi(x), y, num_classes, m) for x, y in zip(xs, ys)]
    return np.stack(rows) if rows else np.zeros((0, STATISTICS["class_means"].dim(l, num_classes)))


def _random_rows(xs, ys, ids, num_classes, l, phi, method, seed):
    return random_vectors(ids, l, seed)


# --statistic NAME: what a conditioned model receives (the paper's eigenvalues by default).
# A new statistic is one row here: its width and its per-client computation.
STATISTICS: dict[str, Statistic] = {
    "eigenvalues": Statistic(
        "top-l eigenvalues of the covariance of [phi(x), onehot(y)] (the paper's)", lambda l, c: l, _eigenvalue_rows
    ),
    "class_means": Statistic(
        "label frequencies and class-mean features projected on a public random basis, in label order "
        "(sees label permutations and rotations)",
        lambda l, c: c * (1 + class_means_projections(c, l)),
        _class_mean_rows,
    ),
    "random": Statistic(
        "control: a random vector per client from (seed, client id); no data used",
        lambda l, c: l,
        _random_rows,
        uses_data=False,
    ),
}


def statistic_dim(name: str, num_eigenvalues: int, num_classes: int) -> int:
    """The width of a statistic: l for the eigenvalues and the control, C (1 + m) for class means."""
    return STATISTICS[check_statistic(name)].dim(num_eigenvalues, num_classes)


def check_statistic(name: str) -> str:
    if name not in STATISTICS:  # a built-in name needs no plug-in (module-level protocols read one at import)
        load_entry_points()  # installed plug-ins may register statistics
    if name not in STATISTICS:
        raise FedcondError(f"unknown statistic '{name}'; choose {', '.join(STATISTICS)}")
    return name


def normalise_with(raw: np.ndarray, population: np.ndarray, how: str = "zscore") -> np.ndarray:
    """Normalise clients that were not part of `population` with the population's parameters (a
    newcomer's statistic: the z-score's mean and std come from the training clients)."""
    if how == "zscore":
        mean, std = population.mean(axis=0), population.std(axis=0)
        return (raw - mean) / np.where(std > 0, std, 1.0)
    return normalise(raw, how)


def normalise(raw: np.ndarray, how: str = "zscore") -> np.ndarray:
    """Turn raw eigenvalue vectors [N, l] into model inputs.

    zscore: per component across clients (the paper); constant components become 0.
    log: log(1 + v) per client; needs no population statistics.
    none: the raw eigenvalues.
    """
    if how == "zscore":
        mean, std = raw.mean(axis=0), raw.std(axis=0)
        return (raw - mean) / np.where(std > 0, std, 1.0)
    if how == "log":
        return np.log1p(raw)
    if how == "none":
        return raw.copy()
    raise FedcondError(f"unknown statistics normalisation '{how}'; choose zscore, log or none")
