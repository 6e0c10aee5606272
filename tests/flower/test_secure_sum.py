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
    return {i: secure_sum.masked_upload(v, i, keys[i][0], publics) for i, v in enumerate(values)}


def secure_zscore(raw):
    s1, s2 = secure_sum.unmask_sums(uploads_for(list(raw)), raw.shape[1])
    mean, std = secure_sum.zscore_from_sums(s1, s2, len(raw))
    return (raw - mean) / np.where(std > 0, std, 1.0)


def test_sums_are_exact_and_single_uploads_are_noise():
    rng = np.random.default_rng(0)
    raw = rng.gamma(2.0, 3.0, size=(6, 32))  # eigenvalue-like, [N, L]
    ups = uploads_for(list(raw))
    s1, s2 = secure_sum.unmask_sums(ups, 32)
    assert s1 == [sum(col) for col in zip(*[secure_sum.quantise(v) for v in raw])]  # exact integers
    for i, u in ups.items():  # one upload, read as this client's fixed point, is not its values
        alone, _ = secure_sum.unmask_sums({i: u}, 32)
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
    s1, _ = secure_sum.unmask_sums({0: uploads_for(list(raw))[0]}, 4)
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

    sgd = SGDConfig(lr=0.02, momentum=0.5, batch_size=16, weight_decay=1e-4, max_grad_norm=10.0, precision="bf16")
    params = {"w": torch.ones(2)}
    job = Job(params=params, x=torch.zeros(0), y=torch.zeros(0), s=None, epochs=1, seed=(0,), sgd=sgd)
    decoded = decode_jobs(encode_jobs([job], "{}"), {})
    assert decoded[0]["sgd"] == sgd


def recovered(upload, width):
    """What a server reads from one upload whose masks it can remove: the client's values."""
    s1, _ = secure_sum.unmask_sums({0: upload}, width)
    return np.array(s1, dtype=float) / 2.0**64


class Federation:
    """Five clients with identities in a roster (handed to every node out of band), and client 0's key-exchange key."""

    def __init__(self, n=5):
        self.identities = [secure_sum.new_identity() for _ in range(n)]
        self.roster = {i: ident[1] for i, ident in enumerate(self.identities)}
        self.keys = [secure_sum.new_keypair() for _ in range(n)]
        self.publics = {i: k[1] for i, k in enumerate(self.keys)}
        self.signatures = {i: secure_sum.sign_key(self.identities[i][0], i, self.keys[i][1]) for i in range(n)}

    def upload(self, values, publics, signatures=None, roster="own", min_peers=3):
        private, public = self.keys[0]
        return secure_sum.client_upload(values, 0, private, public, publics, min_peers,
                                        self.signatures if signatures is None else signatures,
                                        self.roster if roster == "own" else roster)


def test_a_server_that_isolates_a_client_gets_a_refusal_not_its_statistics():
    fed, v = Federation(), np.array([3.25, 1.5, 0.125])
    private, public = fed.keys[0]
    assert np.array_equal(recovered(secure_sum.masked_upload(v, 0, private, {0: public}), 3), v)  # what the attack gave
    for alone in ({0: public}, {}, {0: public, 1: fed.publics[1]}):  # only the client, nobody, one peer (< 3)
        with pytest.raises(FedcondError, match="not uploading"):
            fed.upload(v, alone)
    with pytest.raises(FedcondError, match="repeats a key"):
        fed.upload(v, {0: public, 1: public, 2: public, 3: public})
    ups = {0: fed.upload(v, fed.publics)}  # the honest key list: accepted, and the sum still comes out exact
    for i in range(1, 5):
        ups[i] = secure_sum.masked_upload(v * i, i, fed.keys[i][0], fed.publics)
    assert np.array_equal(np.array(secure_sum.unmask_sums(ups, 3)[0], dtype=float) / 2.0**64, v * 11)  # v + (1+2+3+4) v


def test_a_server_that_substitutes_its_own_keys_gets_a_refusal_not_its_statistics():
    fed, v = Federation(), np.array([3.25, 1.5, 0.125])
    fake = {j: secure_sum.new_keypair() for j in range(1, 5)}  # keys the server holds the private halves of
    publics = {0: fed.keys[0][1], **{j: k[1] for j, k in fake.items()}}
    impostor = secure_sum.new_identity()
    signatures = {**fed.signatures, **{j: secure_sum.sign_key(impostor[0], j, k[1]) for j, k in fake.items()}}
    upload = fed.upload(v, publics, signatures, roster=None)  # a node without a roster cannot tell: the attack works
    unmask = sum(m for j in fake for m in [np.array(secure_sum._mask(fake[j][0], fed.keys[0][1], 6), dtype=object)])
    s = [(int.from_bytes(upload[k * 32:(k + 1) * 32], "little") - int(unmask[k])) % secure_sum.MODULUS for k in range(3)]
    assert np.array_equal(np.array(s, dtype=float) / 2.0**64, v)
    for sigs in (signatures, {0: fed.signatures[0]}):  # signed by another identity, or not signed at all
        with pytest.raises(FedcondError, match="not signed by its identity in the roster; not uploading"):
            fed.upload(v, publics, sigs)
    with pytest.raises(FedcondError, match="not in this node's roster"):
        fed.upload(v, {**fed.publics, 7: secure_sum.new_keypair()[1]}, {**fed.signatures, 7: b""})


def test_malformed_uploads_stop_the_run_with_one_line():
    rng = np.random.default_rng(2)
    raw = rng.gamma(2.0, 3.0, size=(4, 6))
    ups = uploads_for(list(raw))
    short = {**ups, 2: ups[2][:-32]}  # a short upload was accepted when the width came from the first one
    with pytest.raises(FedcondError, match="client 2's upload is 352 bytes, not the 384 of 6 statistics"):
        secure_sum.unmask_sums(short, 6)
    with pytest.raises(FedcondError, match="client 0's upload is 416 bytes"):
        secure_sum.unmask_sums({**ups, 0: ups[0] + bytes(32)}, 6)
    with pytest.raises(FedcondError, match="client 1's upload is str"):
        secure_sum.unmask_sums({**ups, 1: "garbage"}, 6)
    garbage = {**ups, 3: rng.bytes(len(ups[3]))}  # the right width, random content: mean ~1e56, std 0 before
    with pytest.raises(FedcondError, match="a client uploaded garbage"):
        secure_sum.zscore_from_sums(*secure_sum.unmask_sums(garbage, 6), 4)
    mean, std = secure_sum.zscore_from_sums(*secure_sum.unmask_sums(ups, 6), 4)
    assert np.allclose(mean, raw.mean(0)) and np.allclose(std, raw.std(0))


def test_the_default_peer_threshold():
    assert [secure_sum.default_min_peers(n) for n in (2, 3, 4, 5, 10)] == [1, 2, 3, 3, 3]
