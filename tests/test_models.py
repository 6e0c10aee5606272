import pytest
import torch

from fedcond.models import cifar_cnn, mnist_cnn, model_for


def test_mnist_model_parameter_count_matches_spec():
    # conv 320 + 18,496; FC 3168*128+128 = 405,632; FC 128*10+10 = 1,290
    assert sum(p.numel() for p in mnist_cnn(10, stat_dim=32).parameters()) == 425_738
    assert sum(p.numel() for p in mnist_cnn(10, stat_dim=0).parameters()) == 421_642


def test_shapes_and_conditioning_changes_output():
    torch.manual_seed(0)
    x = torch.randint(0, 256, (4, 1, 28, 28), dtype=torch.uint8)
    m = mnist_cnn(10, 32)
    s1, s2 = torch.zeros(4, 32), torch.ones(4, 32)
    assert m(x, s1).shape == (4, 10)
    assert not torch.allclose(m(x, s1), m(x, s2))
    assert m.fc1.in_features == 3136 + 32


def test_cifar_model_layout():
    m = cifar_cnn(10, 32)
    assert m.fc1.in_features == 4096 + 32 and m.fc1.out_features == 256
    assert sum(isinstance(x, torch.nn.BatchNorm2d) for x in m.modules()) == 4
    assert m(torch.zeros(2, 3, 32, 32, dtype=torch.uint8), torch.zeros(2, 32)).shape == (2, 10)


def test_film_starts_as_identity_and_learns_to_modulate():
    torch.manual_seed(0)
    m = mnist_cnn(10, 8, conditioning="film")
    assert m.fc1.in_features == 3136  # FiLM does not concatenate
    x = torch.randint(0, 256, (3, 1, 28, 28), dtype=torch.uint8)
    assert torch.allclose(m(x, torch.zeros(3, 8)), m(x, torch.randn(3, 8)))  # zero-initialised modulation
    torch.nn.init.normal_(m.film[0].weight)
    assert not torch.allclose(m(x, torch.zeros(3, 8)), m(x, torch.ones(3, 8)))


@pytest.mark.parametrize("kernels", [False, True])
def test_film_on_one_clients_batch_folds_into_the_conv(kernels, monkeypatch):
    """Every sample with the same s: the modulation folds into the conv weights; the function and
    every gradient are those of the modulation as a step of its own, to float rounding."""
    torch.manual_seed(1)
    m = mnist_cnn(10, 8, conditioning="film").to(memory_format=torch.channels_last)
    for lin in m.film:
        torch.nn.init.normal_(lin.weight, std=0.3)
        torch.nn.init.normal_(lin.bias, std=0.3)
    if kernels:
        m.use_cpu_kernels()
    x = torch.randint(0, 256, (9, 1, 28, 28), dtype=torch.uint8)
    s, y = torch.randn(1, 8).expand(9, 8), torch.randint(0, 10, (9,))
    grads = {}
    for fold in ("1", "0"):
        monkeypatch.setenv("FEDCOND_FILM_FOLD", fold)
        m.zero_grad(set_to_none=True)
        out = m(x, s)
        torch.nn.functional.cross_entropy(out, y).backward()
        grads[fold] = (out.detach(), {k: p.grad.clone() for k, p in m.named_parameters()})
    (out1, g1), (out0, g0) = grads["1"], grads["0"]
    assert torch.allclose(out1, out0, rtol=1e-5, atol=1e-5)
    assert set(g1) == set(g0)
    for k in g0:
        assert torch.allclose(g1[k], g0[k], rtol=1e-4, atol=1e-6), k
    assert g0["film.0.weight"].abs().sum() > 0  # the modulation is learned through the fold too


def test_film_fold_needs_one_client_on_the_cpu():
    from fedcond.models.cnn import _one_client

    assert _one_client(torch.ones(5, 3)) and _one_client(torch.zeros(1, 3))
    assert not _one_client(torch.tensor([[1.0, 2.0], [1.0, 2.5]]))
    assert not _one_client(torch.full((2, 2), float("nan")))  # NaN is not equal to itself: no fold
    assert not _one_client(torch.zeros(0, 3))
    m = mnist_cnn(10, 3, conditioning="film")
    assert m(torch.zeros(0, 1, 28, 28, dtype=torch.uint8), torch.zeros(0, 3)).shape == (0, 10)


def test_model_for_picks_backbone():
    assert model_for((1, 28, 28), 10).fc1.out_features == 128
    assert model_for((3, 32, 32), 100).fc2.out_features == 100


def _literal_light_cnn_features(m, x):
    """SPEC C.6 as written: conv, GroupNorm, ReLU, MaxPool per block, in NCHW."""
    import torch.nn.functional as F

    h = m.normalise(x)
    for conv, gn, _pool, _relu in m.blocks:
        h = F.max_pool2d(F.relu(gn(conv(h))), 2)
    h = F.relu(m.fc1(h.flatten(1)))
    return F.relu(m.fc2(h))


def test_light_cnn_pool_before_relu_is_bitwise_the_literal_order():
    """In NCHW and channels-last (the engines' layout), on the stock layers: outputs and every
    gradient equal (the compiled kernels the engines add are checked against these layers in
    test_cpu_kernels)."""
    from fedcond.models import ModelSpec

    torch.manual_seed(0)
    x = torch.randint(0, 256, (6, 3, 64, 64), dtype=torch.uint8)
    y = torch.randint(0, 7, (6,))
    for channels_last in (False, True):
        spec = ModelSpec(input_shape=(3, 64, 64), num_classes=7)  # RGB of 64 px or more: the light CNN
        m = spec.build().to(memory_format=torch.channels_last) if channels_last else spec.build()
        xx = x.contiguous(memory_format=torch.channels_last) if channels_last else x

        def run(f):
            m.zero_grad()
            out = m.head(f(m, xx))
            torch.nn.functional.cross_entropy(out, y).backward()
            return out.detach(), [p.grad.clone() for p in m.parameters()]

        ours, g_ours = run(lambda mm, xb: mm.features(xb))
        literal, g_lit = run(_literal_light_cnn_features)
        assert torch.equal(ours, literal) and all(torch.equal(a, b) for a, b in zip(g_ours, g_lit)), channels_last
