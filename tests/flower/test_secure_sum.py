"""The masked secure sum: the server gets the exact sums and z-score, and no single upload says anything."""

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


def secure_zscore(raw):
    s1, s2 = secure_sum.unmask_sums(uploads_for(list(raw)))
    mean, std = secure_sum.zscore_from_sums(s1, s2, len(raw))
    return (raw - mean) / np.where(std > 0, std, 1.0)


def test_sums_are_exact_and_single_uploads_are_noise():
    rng = np.random.default_rng(0)
    raw = rng.gamma(2.0, 3.0, size=(6, 32))  # eigenvalue-like, [N, L]
    ups = uploads_for(list(raw))
    s1, s2 = secure_sum.unmask_sums(ups)
    assert s1 == [sum(col) for col in zip(*[secure_sum.quantise(v) for v in raw])]  # exact integers
    for i, u in enumerate(ups):  # one upload, read as this client's fixed point, is not its values
        alone, _ = secure_sum.unmask_sums([u])
        assert not np.allclose(np.array(alone, dtype=float) / 2.0**64, raw[i], rtol=1e-3)


def test_zscore_equals_the_pooled_one_even_for_tiny_spreads():
    rng = np.random.default_rng(1)
    # large eigenvalues with tiny spread across clients: E[v^2] - E[v]^2 in floats would lose ~8 digits
    raw = np.concatenate([50.0 + 1e-4 * rng.random((10, 4)), 1e-3 * rng.random((10, 4)), np.zeros((10, 2))], axis=1)
    z_secure, z_pooled = secure_zscore(raw), S.normalise(raw, "zscore")
    np.testing.assert_allclose(z_secure, z_pooled, rtol=0, atol=1e-9)
    assert (z_secure.astype(np.float32) == z_pooled.astype(np.float32)).mean() > 0.95
    assert np.all(z_secure[:, -2:] == 0)  # constant components become 0, as in the pooled z-score


def test_one_client_cannot_unmask_without_the_others():
    raw = np.arange(8.0).reshape(2, 4) + 1
    s1, _ = secure_sum.unmask_sums(uploads_for(list(raw))[:1])
    assert not np.allclose(np.array(s1, dtype=float) / 2.0**64, raw[0])


def test_values_too_large_for_fixed_point_are_refused():
    with pytest.raises(FedcondError, match="below 2\\^40"):
        secure_sum.quantise(np.array([1e13]))


def test_masks_come_from_the_chacha20_keystream():
    """RFC 8439 appendix A.1, test vector 1 (all-zero key and nonce, block 0): the mask expansion is
    the ChaCha20 keystream, a cryptographic generator."""
    stream = secure_sum.mask_stream(bytes(32), 64)
    assert stream[:32].hex() == "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
    assert secure_sum.mask_stream(bytes(32), 128)[:64] == stream  # one stream, extended, not reseeded
    a, b = secure_sum.new_keypair(), secure_sum.new_keypair()
    assert secure_sum._mask(a[0], b[1], 3) == secure_sum._mask(b[0], a[1], 3)  # both ends of a pair agree
    assert all(0 <= m < secure_sum.MODULUS for m in secure_sum._mask(a[0], b[1], 3))


def test_a_jobs_optimiser_crosses_the_wire_whole():
    """FedDyn's clipping must reach the client: every SGDConfig field survives encode/decode."""
    pytest.importorskip("flwr")
    import torch

    from fedcond.engine import Job, SGDConfig
    from fedcond.flower.wire import decode_jobs, encode_jobs

    sgd = SGDConfig(lr=0.02, momentum=0.5, batch_size=16, weight_decay=1e-4, max_grad_norm=10.0)
    params = {"w": torch.ones(2)}
    job = Job(params=params, x=torch.zeros(0), y=torch.zeros(0), s=None, epochs=1, seed=(0,), sgd=sgd)
    decoded = decode_jobs(encode_jobs([job], "{}"), {})
    assert decoded[0]["sgd"] == sgd
