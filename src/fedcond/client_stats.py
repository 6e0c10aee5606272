"""Each client's statistic, computed from its own data: what the simulator, a held-out newcomer and a
Flower client all call (stats.py holds the mathematics; this module picks phi and the statistic)."""

from __future__ import annotations

import numpy as np
import torch

from . import stats as S
from .errors import FedcondError
from .protocol import Protocol
from .scenarios import Scenario


def feature_map(fed, protocol: Protocol, data_dir=None):
    """phi of SPEC A.2: the pixels for 28x28 grey images; the frozen cross-trained encoder for 32x32 RGB."""
    if fed.input_shape == (1, 28, 28):
        return S.pixel_features
    if fed.input_shape == (3, 32, 32):
        from .encoder import default_source, encoder_features, load_encoder

        source = protocol.encoder_source or default_source(fed.dataset)
        return encoder_features(load_encoder(source, data_dir))
    raise FedcondError(f"no feature map for client statistics of {fed.input_shape} images")


def _feature_map_when_used(fed, protocol: Protocol, data_dir=None):
    """feature_map; for images it has none for, a phi that says so only when called: a plug-in's
    statistic (or dataset of another shape) may need no feature map."""
    if fed.input_shape in ((1, 28, 28), (3, 32, 32)):
        return feature_map(fed, protocol, data_dir)

    def refuse(x):
        return feature_map(fed, protocol, data_dir)  # raises: no feature map for this shape

    return refuse


def client_statistics(
    scenario: Scenario, protocol: Protocol, data_dir=None, seed: int = 0, ids=None
) -> tuple[np.ndarray, torch.Tensor]:
    """Raw statistics [N, l] (protocol.statistic: the eigenvalues, or the random control drawn
    from `seed` and the client ids, by default 0..N-1) and the normalised model input [N, l] (float32)."""
    fed = scenario.federation
    raw = raw_statistics(fed, protocol, data_dir, seed, ids=ids)
    return raw, torch.as_tensor(S.normalise(raw, protocol.stats_normalisation), dtype=torch.float32)


def raw_statistics(fed, protocol: Protocol, data_dir=None, seed: int = 0, clients=None, ids=None) -> np.ndarray:
    """Each client's statistic before normalisation [N, dim], computed from its own data alone;
    `clients` (default: the federation's) with their ids `ids` (the random control's draw)."""
    clients = fed.clients if clients is None else clients
    ids = list(range(len(clients))) if ids is None else list(ids)
    stat = S.STATISTICS[S.check_statistic(protocol.statistic)]
    phi = _feature_map_when_used(fed, protocol, data_dir) if stat.uses_data else None
    return stat.compute(
        [c.x_train for c in clients],
        [c.y_train for c in clients],
        ids,
        fed.num_classes,
        protocol.num_eigenvalues,
        phi,
        protocol.stats_method,
        seed,
    )
