"""The masked secure sum: the server gets the exact sum and z-score, and no single upload says anything."""

import numpy as np
import pytest

pytest.importorskip("cryptography")

from fedcond import stats as S  # noqa: E402
from fedcond.errors import FedcondError  # noqa: E402
from fedcond.flower import secure_sum  # noqa: E402


def uploads_for(values):
    keys = [secure_sum.new_keypair() for _ in values]
    publics = {i: k[1] for i, k in enumerate(keys)}
    return [secure_sum.masked_upload(v, i, keys[i][0], publics) for i, v in enumerate(values)]


def test_masks_cancel_in_the_sum_only():
    rng = np.random.default_rng(0)
    raw = rng.gamma(2.0, 3.0, size=(6, 32))  # eigenvalue-like, [N, L]
    ups = uploads_for([np.concatenate([v, v**2]) for v in raw])
    total = secure_sum.unmask_sum(ups)
    np.testing.assert_allclose(total[:32], raw.sum(axis=0), rtol=0, atol=1e-8)
    for i, u in enumerate(ups):  # a single upload decodes to noise, not to the client's values
        decoded = secure_sum.decode(u)
        assert not np.allclose(decoded[:32], raw[i], rtol=1e-3)
        assert np.abs(decoded).max() > 1e6
    mean, std = secure_sum.zscore_from_sums(total, len(raw), 32)
    z_secure = (raw - mean) / std
    np.testing.assert_allclose(z_secure, S.normalise(raw, "zscore"), rtol=0, atol=1e-7)


def test_one_client_cannot_unmask_without_the_others():
    raw = np.arange(8.0).reshape(2, 4)
    ups = uploads_for(list(raw))
    assert not np.allclose(secure_sum.unmask_sum(ups[:1]), raw[0])


def test_values_too_large_for_fixed_point_are_refused():
    with pytest.raises(FedcondError, match="too large"):
        secure_sum.encode(np.array([1e12]), num_clients=10)
