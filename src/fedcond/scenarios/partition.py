"""The one partitioning mechanism every scenario family uses.

A scenario is a list of `ClusterSpec`s. Each cluster draws from some source classes, maps them
to task labels, and may rotate its images. The images of one source class are divided, at
random and disjointly, among all clusters that draw that class; a cluster's pool is then dealt
into disjoint, near-equal client shares. Train and test splits are divided the same way, so each
client's test set follows its own cluster's distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for annotations: scenarios take any object with ImageData's fields
    from ..data import ImageData
from ..errors import FedcondError
from .federation import ClientData, Federation, GroundTruth, Scenario


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    source: str  # dataset the cluster draws images from
    label_map: tuple[int, ...]  # source class -> task label, -1 where the cluster does not draw it
    rotation: float = 0.0  # degrees, counter-clockwise
    clients: int = 5  # clients in this cluster

    @property
    def classes(self) -> tuple[int, ...]:
        return tuple(c for c, t in enumerate(self.label_map) if t >= 0)


def subsample(data, fraction: float, seed: int):
    """A stratified, seeded share of every split of an ImageData (the smoke protocol's small data)."""
    import dataclasses

    if not 0 < fraction <= 1:
        raise FedcondError(f"fraction must be in (0, 1], got {fraction}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5AB5]))  # purpose: subsampling
    if hasattr(data, "domain"):  # a multi-domain dataset (one split): stratify by (domain, class)
        strata = data.domain * len(data.classes) + data.y
        idx = np.sort(
            np.concatenate(
                [
                    rng.permutation(np.flatnonzero(strata == g))[: max(1, int(round(fraction * np.sum(strata == g))))]
                    for g in np.unique(strata)
                ]
            )
        )
        return dataclasses.replace(data, x=data.x[idx], y=data.y[idx], domain=data.domain[idx])
    keep = {}
    for split in ("train", "test"):
        y = getattr(data, f"y_{split}")
        idx = np.concatenate(
            [
                rng.permutation(np.flatnonzero(y == c))[: max(1, int(round(fraction * np.sum(y == c))))]
                for c in np.unique(y)
            ]
        )
        keep[split] = np.sort(idx)
    changes = {f"{a}_{split}": getattr(data, f"{a}_{split}")[keep[split]] for split in keep for a in ("x", "y")}
    for split in keep:
        if getattr(data, f"coarse_{split}", None) is not None:
            changes[f"coarse_{split}"] = getattr(data, f"coarse_{split}")[keep[split]]
    return (
        dataclasses.replace(data, **changes)
        if dataclasses.is_dataclass(data)
        else type(data)(**{**vars(data), **changes})
    )


def rotate(images: torch.Tensor, degrees: float) -> torch.Tensor:
    """Rotate uint8 images [N, C, H, W] counter-clockwise; multiples of 90 degrees are exact."""
    if degrees % 360 == 0:
        return images
    if degrees % 90 == 0:
        return torch.rot90(images, k=int(degrees // 90) % 4, dims=(2, 3))
    theta = np.deg2rad(degrees)
    cos, sin = float(np.cos(theta)), float(np.sin(theta))
    # affine_grid maps output coords to input coords, so the inverse rotation goes here
    mat = torch.tensor([[cos, -sin, 0.0], [sin, cos, 0.0]], dtype=torch.float32)
    grid = F.affine_grid(mat.expand(images.shape[0], 2, 3), list(images.shape), align_corners=False)
    out = F.grid_sample(images.float(), grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return out.round().clamp(0, 255).to(torch.uint8)


def to_nchw(x: np.ndarray) -> torch.Tensor:
    """uint8 [N, H, W] or [N, H, W, 3] -> uint8 tensor [N, C, H, W]."""
    t = torch.from_numpy(np.ascontiguousarray(x))
    return t.unsqueeze(1) if t.ndim == 3 else t.permute(0, 3, 1, 2).contiguous()


def _divide_split(
    specs: list[ClusterSpec], labels: dict[str, np.ndarray], rng: np.random.Generator, split: str
) -> list[list[np.ndarray]]:
    """Source indices of every client of every cluster for one split: [cluster][client] -> idx."""
    pools: list[list[np.ndarray]] = [[] for _ in specs]
    for source in sorted({s.source for s in specs}):
        y = labels[source]
        for cls in np.unique(y):
            takers = [
                k
                for k, s in enumerate(specs)
                if s.source == source and cls < len(s.label_map) and s.label_map[cls] >= 0
            ]
            if not takers:
                continue
            idx = rng.permutation(np.flatnonzero(y == cls))
            for k, part in zip(takers, np.array_split(idx, len(takers))):
                pools[k].append(part)
    shares = []
    for k, spec in enumerate(specs):
        pool = rng.permutation(np.concatenate(pools[k]) if pools[k] else np.zeros(0, dtype=np.int64))
        if len(pool) < spec.clients:
            raise FedcondError(
                f"cluster '{spec.name}' has {len(pool)} {split} samples, fewer than its {spec.clients} clients"
            )
        shares.append(np.array_split(pool, spec.clients))
    return shares


def build(
    family: str,
    dataset: str,
    specs: list[ClusterSpec],
    sources: dict[str, ImageData],
    num_classes: int,
    seed: int,
    label_names: tuple[str, ...] = (),
    params: dict | None = None,
) -> Scenario:
    """Partition the sources into clients as the cluster specs say; deterministic given `seed`."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5CE7]))  # purpose: data split
    tensors = {
        name: {
            "train": (to_nchw(d.x_train), torch.as_tensor(d.y_train, dtype=torch.int64)),
            "test": (to_nchw(d.x_test), torch.as_tensor(d.y_test, dtype=torch.int64)),
        }
        for name, d in sources.items()
    }
    shapes = {tuple(t["train"][0].shape[1:]) for t in tensors.values()}
    if len(shapes) != 1:
        raise FedcondError(f"the sources of one scenario must share an image shape, got {sorted(shapes)}")
    split_shares = {
        split: _divide_split(specs, {n: t[split][1].numpy() for n, t in tensors.items()}, rng, split)
        for split in ("train", "test")
    }
    clients, cluster = [], []
    for k, spec in enumerate(specs):
        label_map = torch.tensor(spec.label_map, dtype=torch.int64)
        for j in range(spec.clients):
            parts = []
            for split in ("train", "test"):
                x_all, y_all = tensors[spec.source][split]
                idx = torch.from_numpy(np.sort(split_shares[split][k][j]))
                parts += [rotate(x_all[idx], spec.rotation), label_map[y_all[idx]]]
            clients.append(ClientData(*parts))
            cluster.append(k)
    mean, std = _normalisation(sources)
    federation = Federation(
        family=family,
        dataset=dataset,
        clients=tuple(clients),
        num_classes=num_classes,
        input_shape=shapes.pop(),
        mean=mean,
        std=std,
        label_names=label_names,
        params=dict(params or {}),
    )
    truth = GroundTruth(cluster=np.array(cluster, dtype=np.int64), cluster_names=tuple(s.name for s in specs))
    return Scenario(federation, truth)


def _normalisation(sources: dict[str, ImageData]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean/std of the pooled training images (scaled to [0, 1]), in chunks to bound memory."""
    total = sq = None
    count = 0
    for d in sources.values():
        x = d.x_train.reshape(len(d.x_train), -1, 1 if d.x_train.ndim == 3 else 3)  # [N, H*W, C]
        for start in range(0, len(x), 8192):
            chunk = x[start : start + 8192].astype(np.float64) / 255.0
            s, q = chunk.sum(axis=(0, 1)), (chunk**2).sum(axis=(0, 1))
            total, sq = (s, q) if total is None else (total + s, sq + q)
            count += chunk.shape[0] * chunk.shape[1]
    mean = total / count
    std = np.sqrt(np.maximum(sq / count - mean**2, 0.0))
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)
