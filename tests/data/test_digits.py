"""The embedded digits set: 28x28 uint8, deterministic stratified split."""
import numpy as np

import fedcond.data as fd


def test_digits():
    d = fd.load("digits")
    assert d.name == "digits" and d.classes == tuple("0123456789")
    assert d.x_train.shape == (1347, 28, 28) and d.x_test.shape == (450, 28, 28)
    assert d.x_train.dtype == np.uint8 and d.y_train.dtype == np.int64
    assert d.x_train.max() == 255 and d.x_train.min() == 0
    # Stratified: each class keeps ~25 % of its images in the test set.
    total = np.bincount(np.concatenate([d.y_train, d.y_test]))
    assert np.all(np.abs(np.bincount(d.y_test) - 0.25 * total) <= 1)
    again = fd.load("digits")
    np.testing.assert_array_equal(again.x_train, d.x_train)
    np.testing.assert_array_equal(again.y_test, d.y_test)


def test_upsample_keeps_the_picture():
    from sklearn.datasets import load_digits

    from fedcond.data.digits import upsample

    img = load_digits().images[:5]
    up = upsample(img)
    assert up.shape == (5, 28, 28)
    # Averaging 28x28 back down to 8x8 stays close to the original (0..16 scaled to 0..255).
    edges = [r * 28 // 8 for r in range(9)]
    small = np.array([[[up[i, edges[r]:edges[r + 1], edges[c]:edges[c + 1]].mean() for c in range(8)]
                       for r in range(8)] for i in range(5)])
    assert np.corrcoef(small.ravel(), img.ravel())[0, 1] > 0.9
