"""Domain federations (JDFL, SPEC C.7): every client holds images of one domain (PACS: photo,
art painting, cartoon, sketch; Office-Caltech-10: amazon, caltech, dslr, webcam) and all clients
share one label space; the true cluster of a client is its domain."""

from __future__ import annotations

import numpy as np
import torch

from ..errors import FedcondError
from . import groupings as G
from .federation import ClientData, Federation, GroundTruth, Scenario
from .partition import to_nchw


def domain_split(
    dataset: str,
    load,
    clients_per_domain: int = G.DOMAIN_CLIENTS,
    test_fraction: float = G.DOMAIN_TEST_FRACTION,
    seed: int = 0,
) -> Scenario:
    """Split a multi-domain dataset (DomainData) into clients of one domain each; seeded."""
    if clients_per_domain < 1:
        raise FedcondError(f"clients per domain must be at least 1, got {clients_per_domain}")
    if not 0.0 < test_fraction < 1.0:
        raise FedcondError(f"the test fraction must be in (0, 1), got {test_fraction}")
    data = load(dataset)
    if not hasattr(data, "domain"):
        raise FedcondError(f"'{dataset}' has no domains; the domain federation takes pacs or office_caltech")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xD0AA]))  # purpose: domain split
    x_all = to_nchw(data.x)  # uint8 [N, 3, H, W]
    y_all = torch.as_tensor(data.y, dtype=torch.int64)
    clients, cluster = [], []
    for d, name in enumerate(data.domains):
        train, test = [], []
        for c in range(len(data.classes)):
            idx = rng.permutation(np.flatnonzero((data.domain == d) & (data.y == c)))
            cut = int(round(test_fraction * len(idx)))
            test.append(idx[:cut])
            train.append(idx[cut:])
        train, test = rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))
        if len(train) < clients_per_domain or len(test) < clients_per_domain:
            raise FedcondError(
                f"domain '{name}' has {len(train)} train / {len(test)} test images, "
                f"too few for {clients_per_domain} clients"
            )
        for tr, te in zip(np.array_split(train, clients_per_domain), np.array_split(test, clients_per_domain)):
            tr, te = torch.from_numpy(np.sort(tr)), torch.from_numpy(np.sort(te))
            clients.append(ClientData(x_all[tr], y_all[tr], x_all[te], y_all[te]))
            cluster.append(d)
    train_x = torch.cat([c.x_train for c in clients]).float().div_(255.0)  # [n, 3, H, W]
    mean = tuple(float(v) for v in train_x.mean(dim=(0, 2, 3)))  # the pooled training images' statistics,
    std = tuple(float(v) for v in train_x.std(dim=(0, 2, 3)))  # as the other families normalise
    del train_x
    fed = Federation(
        family="domain",
        dataset=dataset,
        clients=tuple(clients),
        num_classes=len(data.classes),
        input_shape=tuple(x_all.shape[1:]),
        mean=mean,
        std=std,
        label_names=tuple(data.classes),
        params={"clients_per_domain": clients_per_domain, "test_fraction": test_fraction, "seed": seed},
    )
    return Scenario(fed, GroundTruth(cluster=np.array(cluster, dtype=np.int64), cluster_names=tuple(data.domains)))
