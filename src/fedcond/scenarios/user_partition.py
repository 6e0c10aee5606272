"""A partition of one's own as a scenario family (`fedcond.register_partition`): the user writes
only how training samples go to clients; fedcond does the rest as for its standard partitions
(standard.py): the test shares that follow each client's label mix, the tensors, the
normalisation, the ground truth.

The function is data, checked like a file: it may return anything, so a wrong length, an index
out of range or a sample given twice is a one-line error naming the partition, not a crash deep
in training.
"""

from __future__ import annotations

import zlib
from typing import Callable

import numpy as np

from ..errors import FedcondError
from . import partitioners as P
from .federation import GroundTruth, Scenario
from .standard import _build, _check, _rng

# (labels [n] int, num_classes, clients, rng) -> parts, or (parts, cluster ids) where clustered
PartitionFn = Callable[..., object]


def partition_builder(name: str, fn: PartitionFn, clustered: bool) -> Callable[..., Scenario]:
    """The family builder for a registered partition: (dataset, load, clients, samples, seed) -> Scenario."""

    def build(dataset: str, load, clients: int = 100, samples: int | None = None, seed: int = 0) -> Scenario:
        data = load(dataset)
        y = np.asarray(data.y_train)
        C = len(data.classes)
        total = _check(clients, samples, len(y))
        rng = _rng(seed, zlib.crc32(name.encode()))  # purpose: this partition, by its name
        pool = np.sort(rng.permutation(len(y))[:total]) if samples is not None else np.arange(len(y))
        out = fn(y[pool].copy(), C, clients, rng)
        parts, cluster = _checked(name, out, clients, len(pool), clustered)
        parts = [pool[p] for p in parts]
        truth = None
        if cluster is not None:
            ids = sorted(set(cluster.tolist()))
            dense = np.array([ids.index(c) for c in cluster], dtype=np.int64)
            truth = GroundTruth(dense, tuple(f"cluster {c}" for c in ids))
        params = {"clients": clients, "samples": samples, "seed": seed}
        return _build(name, dataset, data, P.counts_of(y, parts, C), truth, rng, params, train_parts=parts)

    build.__name__ = name
    build.__doc__ = fn.__doc__
    return build


def _checked(name: str, out: object, clients: int, n: int, clustered: bool):
    """(parts as int64 arrays, cluster ids or None) from what the partition returned, or a one-line error."""
    what = f"partition '{name}'"
    if clustered:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise FedcondError(f"{what} is registered with clusters: return (parts, cluster of each client)")
        out, cluster_raw = out
        try:
            cluster = np.asarray(cluster_raw, dtype=np.int64).reshape(-1)
        except (TypeError, ValueError):
            raise FedcondError(f"{what}: the cluster ids must be integers, one per client") from None
        if len(cluster) != clients:
            raise FedcondError(f"{what}: {len(cluster)} cluster ids for {clients} clients")
    else:
        cluster = None
    if not isinstance(out, (list, tuple)) or len(out) != clients:
        got = len(out) if isinstance(out, (list, tuple)) else type(out).__name__
        raise FedcondError(f"{what} returned {got} parts for {clients} clients: return one index array per client")
    parts = []
    for i, p in enumerate(out):
        a = np.asarray(p)
        if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
            raise FedcondError(f"{what}: client {i}'s part is not a 1-d array of sample indices")
        a = a.astype(np.int64)
        if a.size and (a.min() < 0 or a.max() >= n):
            raise FedcondError(f"{what}: client {i} has a sample index outside 0..{n - 1}")
        parts.append(a)
    every = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    if len(np.unique(every)) != len(every):
        raise FedcondError(f"{what} gives some training sample to more than one client (or twice to one)")
    return parts, cluster
