import json

import numpy as np
import pytest
import torch

from fedcond import encoder as enc
from fedcond.data import ImageData
from fedcond.errors import ChecksumMismatch, FedcondError
from fedcond.models.encoder import BasicBlock, CrossEncoder
from fedcond.stats import client_statistics
from fedcond_testing import SHARED

torch.set_num_threads(1)


def synthetic(n_train=96, n_test=24, num_classes=3, seed=0):
    """32x32 RGB images whose mean colour depends on the class, so one epoch can learn something."""
    rng = np.random.default_rng(seed)

    def make(n):
        y = np.arange(n, dtype=np.int64) % num_classes
        x = rng.integers(0, 80, size=(n, 32, 32, 3)).astype(np.int64)
        x[np.arange(n), :, :, y % 3] += 150
        return x.astype(np.uint8), y

    (x_tr, y_tr), (x_te, y_te) = make(n_train), make(n_test)
    return ImageData(name="synthetic", x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te,
                     classes=tuple(f"c{i}" for i in range(num_classes)))


@pytest.fixture
def fake_source(monkeypatch):
    """train_encoder reads a small synthetic dataset instead of the real source."""
    data = synthetic()
    monkeypatch.setattr(enc, "source_data", lambda source, data_dir=None: data)
    return data


def train_small(folder, seed=0, **kw):
    kw = {"epochs": 1, "batch_size": 32, "limit": 64, **kw}
    return enc.train_encoder("pacs32", data_dir=folder, seed=seed, **kw)


def test_architecture_two_residual_stages_to_128():
    m = CrossEncoder(num_classes=7)
    x = torch.randint(0, 256, (5, 3, 32, 32), dtype=torch.uint8)
    assert m.embed(x).shape == (5, 128)
    assert m(x).shape == (5, 7)
    assert m.stem[0].out_channels == 32
    for stage, cin, cout in ((m.stage1, 32, 64), (m.stage2, 64, 128)):
        first = stage[0]
        assert isinstance(first, BasicBlock)
        assert (first.conv1.in_channels, first.conv1.out_channels, first.conv1.stride) == (cin, cout, (2, 2))
        assert isinstance(first.shortcut, torch.nn.Sequential)  # projection where the shape changes
    assert sum(isinstance(mod, torch.nn.BatchNorm2d) for mod in m.modules()) == 1 + 2 * 3
    deeper = CrossEncoder(10, blocks_per_stage=2)
    assert isinstance(deeper.stage2[1].shortcut, torch.nn.Identity) and deeper.embed(x).shape == (5, 128)


def test_train_writes_weights_and_sidecar(tmp_path, fake_source):
    seen = []
    path = train_small(tmp_path, progress=seen.append)
    assert path == tmp_path / "encoders" / "encoder-pacs32.pt" and path.is_file()
    meta = json.loads((tmp_path / "encoders" / "encoder-pacs32.json").read_text())
    assert meta["source"] == "pacs32" and meta["epochs"] == 1 and meta["seed"] == 0
    assert meta["train_samples"] == 64 and meta["test_samples"] == 24
    assert 0.0 <= meta["test_accuracy"] <= 1.0
    assert meta["sha256"] == enc.sha256_file(path)
    assert [s["epoch"] for s in seen] == [1] and seen[0]["loss"] > 0
    assert sorted(p.name for p in path.parent.iterdir()) == ["encoder-pacs32.json", "encoder-pacs32.pt"]  # no tmp files


def test_out_dir_separate_from_data_dir(tmp_path, fake_source):
    path = train_small(tmp_path / "data", out_dir=tmp_path / "out")
    assert path == tmp_path / "out" / "encoders" / "encoder-pacs32.pt"
    assert enc.load_encoder("pacs32", tmp_path / "out").embed(torch.zeros(1, 3, 32, 32, dtype=torch.uint8)).shape == (1, 128)


def test_save_load_round_trip_gives_identical_embeddings(tmp_path):
    torch.manual_seed(0)
    model = CrossEncoder(5, mean=(0.4, 0.5, 0.6), std=(0.2, 0.3, 0.25))
    model.train()
    model(torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8))  # moves the batch-norm running statistics
    model.eval()
    path = tmp_path / "encoders" / "encoder-cifar10.pt"
    path.parent.mkdir()
    enc.save_encoder(model, "cifar10", path, {"epochs": 0})
    loaded = enc.load_encoder("cifar10", tmp_path)
    assert not loaded.training and not any(p.requires_grad for p in loaded.parameters())
    x = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8)
    with torch.no_grad():
        assert torch.equal(model.embed(x), loaded.embed(x))


def test_corrupted_weights_are_refused(tmp_path, fake_source):
    path = train_small(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ChecksumMismatch, match="encoder-pacs32.pt"):
        enc.load_encoder("pacs32", tmp_path)


def test_missing_encoder_names_file_and_command(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDCOND_DATA", str(tmp_path))
    with pytest.raises(FedcondError) as err:
        enc.load_encoder("cifar100")
    msg = str(err.value)
    assert "\n" not in msg
    assert str(tmp_path / "encoders" / "encoder-cifar100.pt") in msg
    assert "`fedcond encoder train --source cifar100`" in msg
    with pytest.raises(FedcondError, match="--source pacs32 --data-dir"):
        enc.load_encoder("pacs32", tmp_path / "elsewhere")


def test_unknown_source_and_default_source():
    assert enc.default_source("cifar10") == "cifar100" and enc.default_source("CIFAR100") == "cifar10"
    with pytest.raises(FedcondError, match="cifar10"):
        enc.default_source("mnist")
    with pytest.raises(FedcondError, match="valid sources"):
        enc.load_encoder("imagenet")


def test_same_seed_same_weights_other_seed_differs(tmp_path, fake_source):
    def weights(folder, seed):
        return torch.load(train_small(folder, seed=seed), weights_only=True)["state_dict"]

    a, b, c = weights(tmp_path / "a", 3), weights(tmp_path / "b", 3), weights(tmp_path / "c", 4)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_encoder_features_is_a_float64_phi_for_client_statistics():
    torch.manual_seed(0)
    phi = enc.encoder_features(CrossEncoder(10), batch_size=4)
    x = torch.randint(0, 256, (10, 3, 32, 32), dtype=torch.uint8)
    z = phi(x)
    assert z.shape == (10, 128) and z.dtype == torch.float64 and not z.requires_grad
    assert torch.allclose(z[:3], phi(x[:3]))  # batching and eval mode: rows do not depend on each other
    stats = client_statistics([x[:5], x[5:]], [torch.arange(5) % 10, torch.arange(5) % 10], 10, l=4, phi=phi)
    assert stats.shape == (2, 4)
    with pytest.raises(FedcondError, match="3, 32, 32"):
        phi(torch.zeros(2, 1, 28, 28, dtype=torch.uint8))


def test_resize_keeps_uint8_and_flat_colours():
    x = np.full((3, 112, 112, 3), 200, dtype=np.uint8)
    out = enc.resize_images(x)
    assert out.shape == (3, 32, 32, 3) and out.dtype == np.uint8 and (out == 200).all()


@pytest.mark.slow
def test_pacs32_real_data_one_small_epoch(tmp_path):
    if not all((SHARED / f"pacs_{d}.npz.xz").is_file() for d in ("photo", "art_painting", "cartoon", "sketch")):
        pytest.skip(f"PACS not present in {SHARED} (set FEDCOND_DATA)")
    path = enc.train_encoder("pacs32", data_dir=SHARED, out_dir=tmp_path, epochs=1, limit=128)
    meta = enc.read_sidecar("pacs32", tmp_path)
    assert meta["train_samples"] == 128 and meta["test_samples"] == 1000 and len(meta["classes"]) == 7
    assert enc.load_encoder("pacs32", tmp_path).embed(torch.zeros(2, 3, 32, 32, dtype=torch.uint8)).shape == (2, 128)
    assert path.is_file()
