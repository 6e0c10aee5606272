"""Office-Caltech-10 from a generated folder of images."""
import numpy as np
import pytest

import fedcond.data as fd
from fedcond.data import office_caltech
from fedcond.errors import DatasetMissing, FedcondError


def test_load_folder(tmp_path, gen):
    counts = gen.office_folder(tmp_path, per_class=2, classes=("back_pack", "mug"))
    d = fd.load("office_caltech", tmp_path)
    assert d.domains == ("amazon", "caltech", "dslr", "webcam") and len(d.classes) == 10
    assert d.x.shape == (16, 112, 112, 3) and d.x.dtype == np.uint8
    assert np.bincount(d.domain).tolist() == [counts[k] for k in d.domains]
    assert sorted(set(d.y.tolist())) == [0, 8]  # back_pack, mug
    # A cached second load gives the same arrays; the cache is keyed by the listing.
    assert len(list((tmp_path / ".cache").glob("office_caltech-*-112px-*.npz"))) == 4
    again = fd.load("office_caltech", tmp_path)
    np.testing.assert_array_equal(again.x, d.x)
    sub = fd.load("office_caltech", tmp_path, domains=["webcam"], size=32)
    assert sub.x.shape == (4, 32, 32, 3) and sub.domains == ("webcam",)
    assert "16 images" in fd.verify("office_caltech", tmp_path)


def test_resize_matches_pillow_bilinear(tmp_path):
    from PIL import Image

    img = np.random.default_rng(0).integers(0, 256, (60, 80, 3), dtype=np.uint8)
    folder = tmp_path / "office_caltech" / "dslr" / "mouse"
    folder.mkdir(parents=True)
    Image.fromarray(img).save(folder / "a.png")
    d = fd.load("office_caltech", tmp_path, domains="dslr")
    ref = np.asarray(Image.fromarray(img).resize((112, 112), Image.Resampling.BILINEAR))
    np.testing.assert_array_equal(d.x[0], ref)
    assert d.y.tolist() == [7]


def test_office31_images_level(tmp_path):
    from PIL import Image

    folder = tmp_path / "office_caltech" / "amazon" / "images" / "bike"
    folder.mkdir(parents=True)
    Image.new("RGB", (10, 10)).save(folder / "frame_0001.jpg")
    assert fd.load("office_caltech", tmp_path, domains=("amazon",)).y.tolist() == [1]


def test_errors(tmp_path):
    with pytest.raises(DatasetMissing) as e:
        fd.load("office_caltech", tmp_path)
    assert str(tmp_path) in str(e.value) and "FEDCOND_DATA" in str(e.value) and "office_caltech/" in str(e.value)
    (tmp_path / "office_caltech" / "amazon" / "cats").mkdir(parents=True)
    with pytest.raises(FedcondError, match="unexpected folders cats"):
        fd.load("office_caltech", tmp_path, domains=("amazon",))
    with pytest.raises(FedcondError, match="domains"):
        fd.load("office_caltech", tmp_path, domains=("amazon", "amazon"))
    bad = tmp_path / "office_caltech" / "dslr" / "mug"
    bad.mkdir(parents=True)
    (bad / "broken.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(FedcondError, match="broken.jpg"):
        fd.load("office_caltech", tmp_path, domains="dslr")
    assert office_caltech.SIZE == 112
