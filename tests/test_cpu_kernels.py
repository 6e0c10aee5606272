"""The compiled CPU kernels give the stock layers' function and gradients (models/cpu_kernels)."""

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fedcond.engine import LoopEngine, SGDConfig
from fedcond.engine.local_sgd import cpu_model, train_job
from fedcond.models import cpu_kernels, mnist_cnn
from fedcond.models.cpu_kernels import build, selfcheck
from fedcond.models.spec import ModelSpec

CL = torch.channels_last


def _variants() -> list[str]:
    return [] if os.environ.get("FEDCOND_CPU_KERNELS") == "0" else build.buildable_variants()


@pytest.fixture(scope="module", params=_variants() or ["none"])
def ext(request):
    """Every variant this machine can build and run (native; avx2 on AVX-512 machines; portable),
    loaded as the active kernels with every kernel enabled, whatever the self-check decided."""
    if request.param == "none":
        pytest.skip("CPU kernels switched off by FEDCOND_CPU_KERNELS=0")
    try:
        built = build.load(request.param)
    except build.BuildError:
        # where a compiler is present the kernels must build: a broken build must not hide behind the fallback
        assert shutil.which(os.environ.get("CXX", "c++")) is None
        pytest.skip("no C++ compiler: the stock layers are used")
    saved = cpu_kernels._ext, cpu_kernels._tried, cpu_kernels._enabled
    cpu_kernels._ext, cpu_kernels._tried = built, True
    cpu_kernels._enabled = dict.fromkeys(selfcheck.KERNELS, True)
    yield built
    cpu_kernels._ext, cpu_kernels._tried, cpu_kernels._enabled = saved


def _integer_pair(seed: int, film: bool = False):
    """Two identical MNIST CNNs with small-integer weights (every sum exact, ties everywhere),
    the second with the kernels; the input is read as raw 0..2 values."""
    torch.manual_seed(seed)
    kw = {"stat_dim": 4, "conditioning": "film"} if film else {}
    stock = mnist_cnn(**kw).to(memory_format=CL)
    with torch.no_grad():
        for p in stock.parameters():
            p.copy_(torch.randint(-2, 3, p.shape).float())
    fast = mnist_cnn(**kw).to(memory_format=CL)
    fast.load_state_dict(stock.state_dict())
    fast.use_cpu_kernels()
    for m in (stock, fast):
        m.normalise.mean.zero_()
        m.normalise.std.fill_(1 / 255)
    return stock, fast


def _assert_same_features_and_gradients(stock, fast, h_stock, h_fast):
    """The two models' features equal bit for bit, and so do the gradients an integer upstream gradient gives."""
    assert torch.equal(h_stock, h_fast)
    g = torch.randint(-2, 3, h_stock.shape).float()
    h_stock.backward(g)
    h_fast.backward(g)
    for (name, a), (_, b) in zip(stock.named_parameters(), fast.named_parameters()):
        assert (a.grad is None) == (b.grad is None), name
        assert a.grad is None or torch.equal(a.grad, b.grad), name


@pytest.mark.parametrize("seed", [0, 1])
def test_kernels_equal_stock_layers_exactly_on_integer_data(ext, seed):
    stock, fast = _integer_pair(seed)
    assert [b.kernel for b in fast.blocks] == ["first", "conv_pool"]
    x = torch.randint(0, 3, (13, 1, 28, 28), dtype=torch.uint8)  # an odd batch; many equal windows
    h_stock, h_fast = stock.features(x), fast.features(x)
    _assert_same_features_and_gradients(stock, fast, h_stock, h_fast)


@pytest.mark.parametrize("shape", [(3, 10, 12), (2, 2, 2)])
def test_winograd_block_equals_stock_layers_on_any_even_size(ext, shape):
    """Conv 32->64 + pool + ReLU by Winograd: exact on integer data where the tiles do not fill a
    register block (30 and 1 tiles per image) and every tile touches the padding."""
    b, h, w = shape
    torch.manual_seed(5)
    x = torch.randint(-2, 3, (b, 32, h, w)).float().contiguous(memory_format=CL).requires_grad_()
    wt = torch.randint(-2, 3, (64, 32, 3, 3)).float().requires_grad_()
    bias = torch.randint(-2, 3, (64,)).float().requires_grad_()
    out = cpu_kernels.ConvPoolReLU.apply(x, wt, bias)
    ref = F.relu(F.max_pool2d(F.conv2d(x, wt, bias, padding=1), 2))
    assert out.is_contiguous() and torch.equal(out, ref)
    g = torch.randint(-2, 3, ref.shape).float()
    grads = torch.autograd.grad(out, (x, wt, bias), g)
    expected = torch.autograd.grad(ref, (x, wt, bias), g)
    for name, a, e in zip(("input", "weight", "bias"), grads, expected):
        assert torch.equal(a, e), name


@pytest.mark.parametrize("cin,cout,side", [(32, 32, 32), (32, 64, 16), (64, 64, 6), (64, 128, 6)])
def test_winograd_conv_equals_the_stock_conv_exactly_on_integer_data(ext, cin, cout, side):
    """The unpooled Winograd conv (CIFAR's convs, the light CNN's 64 -> 128): output and all three gradients, bitwise."""
    torch.manual_seed(cin + cout + side)
    x = torch.randint(-2, 3, (3, cin, side, side)).float().contiguous(memory_format=CL).requires_grad_()
    w = torch.randint(-2, 3, (cout, cin, 3, 3)).float().requires_grad_()
    b = torch.randint(-2, 3, (cout,)).float().requires_grad_()
    out, ref = cpu_kernels.WinogradConv.apply(x, w, b), F.conv2d(x, w, b, padding=1)
    assert torch.equal(out, ref)
    g = torch.randint(-2, 3, ref.shape).float()
    for name, a, e in zip(("input", "weight", "bias"), torch.autograd.grad(out, (x, w, b), g),
                          torch.autograd.grad(ref, (x, w, b), g)):
        assert torch.equal(a, e), name


def test_cifar_cnn_with_kernels_trains_like_the_stock_layers(ext):
    """Every 32/64-channel conv of the CIFAR CNN runs by Winograd; outputs, gradients and the batch
    norms' running statistics stay within float rounding of the stock layers."""
    from fedcond.models import cifar_cnn

    torch.manual_seed(7)
    stock = cifar_cnn().to(memory_format=CL)
    fast = cifar_cnn().to(memory_format=CL)
    fast.load_state_dict(stock.state_dict())
    fast.use_cpu_kernels()
    assert sum(getattr(m, "winograd", False) for m in fast.modules()) == 3  # all but the 3 -> 32 conv
    assert list(fast.state_dict()) == list(stock.state_dict())
    x = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8)
    y = torch.randint(0, 10, (16,))
    for m in (stock, fast):
        F.cross_entropy(m(x), y).backward()
    for (name, a), (_, b) in zip(stock.named_parameters(), fast.named_parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-3, atol=1e-5), name
    for (name, a), (_, b) in zip(stock.named_buffers(), fast.named_buffers()):
        assert torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-5), name
    stock.eval(), fast.eval()
    assert torch.allclose(stock(x), fast(x), atol=1e-4)


@pytest.mark.parametrize("channels,groups,height,width", [(32, 8, 6, 4), (64, 8, 8, 8), (128, 8, 4, 6), (32, 32, 2, 2),
                                                          (64, 1, 4, 2)])
def test_group_norm_pool_kernel_equals_the_stock_layers(ext, channels, groups, height, width):
    """GroupNorm, MaxPool 2 and ReLU as one kernel: output and all three gradients those of the
    stock layers run in float64, to float rounding, on channels-last data far from zero mean (where
    a variance taken in float loses digits: torch's float layers are 2.6e-5 off there, the kernel 3e-6)."""
    torch.manual_seed(channels + groups)
    x = (torch.randn(3, channels, height, width) * 3 + 20).contiguous(memory_format=CL).requires_grad_()
    w, b = (torch.rand(channels) + 0.5).requires_grad_(), torch.randn(channels).requires_grad_()
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    ref = F.relu(F.max_pool2d(F.group_norm(x64, groups, w64, b64), 2))
    got = cpu_kernels.GroupNormPoolReLU.apply(x, w, b, groups, 1e-5)
    assert got.shape == ref.shape and got.is_contiguous(memory_format=CL)
    assert torch.allclose(got.double(), ref, atol=1e-5)
    g = torch.randn_like(got)
    expected = torch.autograd.grad(ref, (x64, w64, b64), g.double())
    for name, a, c in zip("x w b".split(), expected, torch.autograd.grad(got, (x, w, b), g)):
        assert torch.allclose(c.double(), a, rtol=1e-4, atol=1e-5), name


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_group_norm_pool_kernel_routes_gradients_as_the_stock_layers_at_ties(ext, seed):
    """On small integers (ties everywhere, windows whose maximum is the group's mean, which the
    ReLU zeroes) the kernel picks the same maxima and ReLU gates as the stock layers: its mean is
    exact there, so the input gradient is zero, and non-zero, at the same places, with the same values
    to float rounding."""
    torch.manual_seed(seed)
    x = torch.randint(-1, 2, (4, 32, 6, 6)).float().contiguous(memory_format=CL).requires_grad_()
    w, b = torch.ones(32, requires_grad=True), torch.zeros(32, requires_grad=True)
    ref = F.relu(F.max_pool2d(F.group_norm(x, 8, w, b), 2))
    got = cpu_kernels.GroupNormPoolReLU.apply(x, w, b, 8, 1e-5)
    assert torch.equal(got > 0, ref > 0)
    g = torch.randn_like(ref)
    (expected,), (grad,) = torch.autograd.grad(ref, (x,), g), torch.autograd.grad(got, (x,), g)
    assert torch.allclose(grad, expected, rtol=1e-4, atol=1e-5)


def test_light_cnn_with_kernels_trains_like_the_stock_layers(ext, monkeypatch):
    """JDFL's light CNN: every block's GroupNorm-pool-ReLU by the kernel and its convs 32 -> 64 and
    64 -> 128 by Winograd; same state_dict, gradients and outputs within float rounding."""
    from fedcond.models.light_cnn import LightCNN

    calls, convs = [], []
    kernel, winograd = cpu_kernels.GroupNormPoolReLU.apply, cpu_kernels.WinogradConv.apply
    monkeypatch.setattr(cpu_kernels.GroupNormPoolReLU, "apply", lambda *a: calls.append(1) or kernel(*a))
    monkeypatch.setattr(cpu_kernels.WinogradConv, "apply", lambda x, w, b: convs.append(tuple(w.shape[:2])) or winograd(x, w, b))

    torch.manual_seed(8)
    stock = LightCNN((3, 32, 32), 28).to(memory_format=CL)
    fast = LightCNN((3, 32, 32), 28).to(memory_format=CL)
    fast.load_state_dict(stock.state_dict())
    fast.use_cpu_kernels()
    assert fast.kernels == [(False, True), (True, True), (True, True)]
    assert list(fast.state_dict()) == list(stock.state_dict())
    x = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8).contiguous(memory_format=CL)
    y = torch.randint(0, 28, (6,))
    for m in (stock, fast):
        F.cross_entropy(m(x), y).backward()
    assert len(calls) == 3 and convs == [(64, 32), (128, 64)]  # the kernels ran, not the stock fallback
    for (name, a), (_, b) in zip(stock.named_parameters(), fast.named_parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-3, atol=1e-5), name
    with torch.no_grad():
        assert torch.allclose(stock(x), fast(x), atol=1e-4)
        assert torch.allclose(stock.features(x), fast.features(x), atol=1e-4)  # FedProc's prototypes


def test_nan_survives_every_kernel_as_in_the_stock_layers(ext):
    """A diverged model must show it: NaN wins the pool and passes the ReLU, as in torch."""
    torch.manual_seed(6)
    x1 = torch.randn(2, 1, 8, 8)
    x1[0, 0, 3, 4] = float("nan")
    w1, b1 = torch.randn(32, 1, 3, 3), torch.randn(32)
    x2 = torch.randn(2, 32, 8, 8).contiguous(memory_format=CL)
    x2[1, 5, 2, 6] = float("nan")
    w2, b2 = torch.randn(64, 32, 3, 3), torch.randn(64)
    cases = [
        (cpu_kernels.FirstBlock.apply(x1, w1, b1), F.conv2d(x1, w1, b1, padding=1)),
        (cpu_kernels.ConvPoolReLU.apply(x2, w2, b2), F.conv2d(x2, w2, b2, padding=1)),
        (cpu_kernels.PoolReLU.apply(x2), x2),
    ]
    norm = cpu_kernels.GroupNormPoolReLU.apply(x2, torch.ones(32), torch.zeros(32), 8, 1e-5)
    ref = F.relu(F.max_pool2d(F.group_norm(x2, 8, torch.ones(32), torch.zeros(32)), 2))
    assert torch.isnan(ref).any() and torch.equal(torch.isnan(norm), torch.isnan(ref))  # the NaN's group, every pixel
    for got, conv in cases:
        ref = F.relu(F.max_pool2d(conv, 2))
        assert torch.isnan(ref).any() and torch.equal(torch.isnan(got), torch.isnan(ref))


def test_kernels_refuse_what_they_cannot_compute(ext):
    reflect = torch.nn.Conv2d(32, 64, 3, padding=1, padding_mode="reflect")
    assert not cpu_kernels.conv_pool_fits(reflect)
    assert cpu_kernels.conv_pool_fits(torch.nn.Conv2d(32, 64, 3, padding=1))
    assert not cpu_kernels.first_block_fits(torch.nn.Conv2d(1, 32, 3, padding=1, padding_mode="circular"))
    x = torch.randn(2, 4, 4, 32)
    with pytest.raises(RuntimeError, match="w:"):
        ext.conv_pool_fwd(x, torch.randn(32, 64, 3, 3), torch.randn(64))  # transposed weight, same size
    out, idx = ext.conv_pool_fwd(x, torch.randn(64, 32, 3, 3), torch.randn(64))
    with pytest.raises(RuntimeError, match="g:"):
        ext.conv_pool_bwd(x, torch.randn(64, 32, 3, 3), torch.randn(2, 64, 4, 4), idx)
    with pytest.raises(RuntimeError, match="no kernel for 48 channels"):
        ext.gn_pool_relu_fwd(torch.randn(2, 4, 4, 48), torch.ones(48), torch.zeros(48), 8, 1e-5)
    with pytest.raises(RuntimeError, match="do not split into 5 groups"):
        ext.gn_pool_relu_fwd(x, torch.ones(32), torch.zeros(32), 5, 1e-5)
    for bad in (torch.empty(2, 0, 0, 32), torch.randn(2, 3, 4, 32)):  # empty, odd side
        with pytest.raises(RuntimeError, match="even sides, not empty"):
            ext.gn_pool_relu_fwd(bad, torch.ones(32), torch.zeros(32), 8, 1e-5)
    assert not cpu_kernels.usable(torch.empty(2, 32, 0, 0))  # the model keeps the stock layers there
    with pytest.raises(RuntimeError, match="gamma:"):
        ext.gn_pool_relu_fwd(x, torch.ones(64), torch.zeros(32), 8, 1e-5)
    out, idx, mean, rstd = ext.gn_pool_relu_fwd(x, torch.ones(32), torch.zeros(32), 8, 1e-5)
    with pytest.raises(RuntimeError, match="mean, rstd:"):
        ext.gn_pool_relu_bwd(x, torch.ones(32), out, idx, mean, rstd[:1])
    with pytest.raises(RuntimeError, match="idx:"):
        ext.gn_pool_relu_bwd(x, torch.ones(32), out, idx.float(), mean, rstd)
    xg = torch.randn(2, 32, 4, 4).contiguous(memory_format=CL).requires_grad_()
    scale = torch.randn(2, 32, 2, 2, requires_grad=True)
    normed = cpu_kernels.GroupNormPoolReLU.apply(xg, torch.ones(32), torch.zeros(32), 8, 1e-5)
    (gx,) = torch.autograd.grad((normed * scale).sum(), xg, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        gx.sum().backward()
    assert cpu_kernels.group_norm_pool_on(torch.nn.GroupNorm(8, 64))
    assert not cpu_kernels.group_norm_pool_on(torch.nn.GroupNorm(8, 48))
    assert not cpu_kernels.group_norm_pool_on(torch.nn.GroupNorm(8, 64, affine=False))
    # second derivatives are not implemented: asking for one fails instead of returning zeros
    xr = torch.randn(2, 32, 4, 4).contiguous(memory_format=CL).requires_grad_()
    scale = torch.randn(2, 64, 2, 2, requires_grad=True)  # the gradient reaching the kernel depends on it
    out = cpu_kernels.ConvPoolReLU.apply(xr, torch.randn(64, 32, 3, 3), torch.randn(64))
    (gx,) = torch.autograd.grad((out * scale).sum(), xr, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        gx.sum().backward()


def test_kernels_match_stock_layers_on_real_valued_data(ext):
    torch.manual_seed(2)
    stock = mnist_cnn().to(memory_format=CL)
    fast = mnist_cnn().to(memory_format=CL)
    fast.load_state_dict(stock.state_dict())
    fast.use_cpu_kernels()
    x = torch.randint(0, 256, (32, 1, 28, 28), dtype=torch.uint8)
    y = torch.randint(0, 10, (32,))
    for m in (stock, fast):
        F.cross_entropy(m(x), y).backward()
    assert torch.allclose(stock(x), fast(x), atol=1e-5)
    for (name, a), (_, b) in zip(stock.named_parameters(), fast.named_parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-6), name


def test_film_model_mixing_clients_modulates_as_a_step_of_its_own(ext):
    stock, fast = _integer_pair(3, film=True)
    assert [b.kernel for b in fast.blocks] == ["first", "conv_pool"]  # for batches where FiLM folds
    x = torch.randint(0, 3, (5, 1, 28, 28), dtype=torch.uint8)
    s = torch.randint(-1, 2, (5, 4)).float()
    s[1] = s[0] + 1  # two clients in the batch: the modulation cannot fold into the conv
    assert torch.equal(stock.features(x, s), fast.features(x, s))


@pytest.mark.parametrize("seed", [0, 1])
def test_film_folded_into_the_fused_kernels_is_exact_on_integer_data(ext, seed, monkeypatch):
    """One client's batch: FiLM runs as the conv with modulated weights, through the fused kernels,
    and equals the modulation as a step of its own (stock layers) exactly, forward and gradients."""
    stock, fast = _integer_pair(seed, film=True)
    x = torch.randint(0, 3, (13, 1, 28, 28), dtype=torch.uint8)
    s = torch.randint(-1, 2, (1, 4)).float().expand(13, 4).clone()
    calls = []
    monkeypatch.setattr(cpu_kernels.FirstBlock, "apply", _counted(cpu_kernels.FirstBlock.apply, calls, "first"))
    monkeypatch.setattr(cpu_kernels.ConvPoolReLU, "apply", _counted(cpu_kernels.ConvPoolReLU.apply, calls, "pool"))
    monkeypatch.setenv("FEDCOND_FILM_FOLD", "0")
    h_stock = stock.features(x, s)  # the stock layers never call the kernels
    monkeypatch.delenv("FEDCOND_FILM_FOLD")
    h_fast = fast.features(x, s)
    assert calls == ["first", "pool"]
    _assert_same_features_and_gradients(stock, fast, h_stock, h_fast)


def _counted(fn, calls: list, name: str):
    def wrapped(*args):
        calls.append(name)
        return fn(*args)

    return wrapped


def test_engine_model_state_dict_is_the_plain_models(ext):
    spec = ModelSpec((1, 28, 28), 10, 0, "concat", (0.1307,), (0.3081,))
    assert list(cpu_model(spec).state_dict()) == list(spec.build().state_dict())


def test_training_with_kernels_follows_stock_training(ext):
    """A few SGD steps with and without the kernels end within float rounding of each other."""
    from fedcond.engine import Job

    torch.manual_seed(4)
    spec = ModelSpec((1, 28, 28), 10, 0, "concat", (0.1307,), (0.3081,))
    init = spec.build().state_dict()
    job = Job(params=init, x=torch.randint(0, 256, (200, 1, 28, 28), dtype=torch.uint8), y=torch.randint(0, 10, (200,)),
              s=None, epochs=1, seed=(0,))
    fast = LoopEngine(SGDConfig()).train(spec, [job])[0]
    stock = train_job(spec.build().to(memory_format=CL), job, SGDConfig())
    for k in init:
        assert torch.allclose(fast.params[k], stock.params[k], rtol=1e-4, atol=1e-5), k


def test_switched_off_by_environment_variable():
    code = ("from fedcond.models import cpu_kernels, mnist_cnn; "
            "assert cpu_kernels.extension() is None; "
            "assert [b.kernel for b in mnist_cnn().use_cpu_kernels().blocks] == [None, None]")
    env = dict(os.environ, FEDCOND_CPU_KERNELS="0")
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


def test_a_failed_build_warns_once_and_keeps_stock_layers(monkeypatch):
    def broken(variant):
        raise build.BuildError("no compiler here")

    monkeypatch.setattr(build, "load", broken)
    monkeypatch.setattr(cpu_kernels, "_tried", False)
    monkeypatch.setattr(cpu_kernels, "_ext", None)
    monkeypatch.delenv("FEDCOND_CPU_KERNELS", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = mnist_cnn().use_cpu_kernels()
        mnist_cnn().use_cpu_kernels()
    assert [b.kernel for b in model.blocks] == [None, None]
    assert len([w for w in caught if "CPU kernels not built" in str(w.message)]) == 1
    assert "no compiler here" in cpu_kernels.status()["reason"]
    x = torch.randint(0, 256, (2, 1, 28, 28), dtype=torch.uint8)
    assert model(x).shape == (2, 10)


def test_torch_func_over_the_parameters_falls_back_to_the_stock_layers(ext, monkeypatch):
    """functional_call + grad wraps the parameters, not the input: the kernels must step aside
    (autograd.Functions without setup_context cannot run under torch.func)."""
    from torch.func import functional_call, grad

    from fedcond.models import cifar_cnn

    for build, shape in ((mnist_cnn, (4, 1, 28, 28)), (cifar_cnn, (4, 3, 32, 32))):
        torch.manual_seed(8)
        model = build().use_cpu_kernels().eval()  # eval: batch norm must not update buffers under torch.func
        x = torch.randint(0, 256, shape, dtype=torch.uint8)
        y = torch.randint(0, 10, (4,))
        params = {k: v.detach() for k, v in model.named_parameters()}
        g = grad(lambda p: F.cross_entropy(functional_call(model, p, (x,)), y))(params)
        F.cross_entropy(model(x), y).backward()
        for k, p in model.named_parameters():
            assert torch.allclose(g[k], p.grad, rtol=1e-3, atol=1e-5), k
    # a switched-on model in a process where the kernels are not built runs the stock layers
    model = mnist_cnn().use_cpu_kernels()
    monkeypatch.setattr(cpu_kernels, "_ext", None)
    assert model(torch.randint(0, 256, (2, 1, 28, 28), dtype=torch.uint8)).shape == (2, 10)


def test_each_variant_is_compiled_for_its_own_vector_width(ext):
    expected = {"avx2": ("avx2", 8), "portable": ("portable", 4)}
    if ext.variant in expected:
        assert (ext.isa, ext.vector_width) == expected[ext.variant]
    else:  # native: the widest the CPU has
        assert ext.isa == build.vector_isa() and ext.vector_width == {"avx512": 16, "avx2": 8, "avx": 8}.get(ext.isa, 4)


def test_variants_offered_follow_the_cpu_flags():
    avx512 = {"avx", "avx2", "fma", "bmi2", "avx512f"}
    assert build.vector_isa(avx512) == "avx512" and build.vector_isa({"avx", "avx2", "fma"}) == "avx2"
    assert build.vector_isa(set()) == "portable"
    assert build.buildable_variants({"avx", "avx2", "fma", "bmi2"}) == ["native", "portable"]
    if build.platform.machine() == "x86_64":
        assert build.buildable_variants(avx512) == ["native", "avx2", "portable"]


def _timings(slower: set[str]) -> dict:
    return {name: {"kernel_ms": 2.0 if name in slower else 1.0, "stock_ms": 1.5,
                   **({"alternative_ms": 1.4} if name in selfcheck.FUSED else {})} for name in selfcheck.KERNELS}


@pytest.fixture
def fresh_dispatch(monkeypatch, tmp_path):
    """A process state where extension() has not run yet, its cache in tmp_path, timings injected."""
    if os.environ.get("FEDCOND_CPU_KERNELS") == "0" or shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no kernels to dispatch")
    built = build.load("native").path  # compiled once in the real cache; each test gets its own copy
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path))
    shutil.copy(built, build.library_path("native"))
    monkeypatch.delenv("FEDCOND_CPU_KERNELS", raising=False)
    monkeypatch.delenv("FEDCOND_CPU_KERNELS_VARIANT", raising=False)
    for name, value in (("_tried", False), ("_ext", None), ("_enabled", {})):
        monkeypatch.setattr(cpu_kernels, name, value)
    calls = []

    def inject(slower: set[str]):
        def measure(layers):
            calls.append(1)
            return _timings(slower)
        monkeypatch.setattr(selfcheck, "measure", measure)
        return calls
    return inject


def test_dispatch_keeps_only_kernels_measured_faster_than_stock(fresh_dispatch):
    from fedcond.models import cifar_cnn

    fresh_dispatch({"conv_pool", "winograd_32_32"})
    mnist = mnist_cnn().use_cpu_kernels()
    assert [b.kernel for b in mnist.blocks] == ["first", "pool"]  # the slower fused block steps aside
    assert mnist.blocks[1].conv.winograd  # its conv alone still runs by the (faster) Winograd 32->64
    cifar = cifar_cnn().use_cpu_kernels()
    on = {(m.in_channels, m.out_channels): m.winograd for m in cifar.modules() if isinstance(m, torch.nn.Conv2d)}
    assert on == {(3, 32): False, (32, 32): False, (32, 64): True, (64, 64): True}
    assert cpu_kernels.status()["enabled"]["conv_pool"] is False
    from fedcond.models.light_cnn import LightCNN

    assert LightCNN((3, 32, 32), 7).use_cpu_kernels().kernels == [(False, True), (True, True), (True, True)]


def test_the_light_cnns_two_winograd_convs_are_each_kept_by_their_own_timing(fresh_dispatch):
    from fedcond.models.light_cnn import LightCNN

    fresh_dispatch({"winograd_64_128"})
    assert LightCNN((3, 32, 32), 7).use_cpu_kernels().kernels == [(False, True), (True, True), (False, True)]


def test_dispatch_falls_back_to_the_stock_layers_where_every_kernel_is_slower(fresh_dispatch):
    from fedcond.models.light_cnn import LightCNN

    fresh_dispatch(set(selfcheck.KERNELS))
    model = mnist_cnn(stat_dim=4, conditioning="film").use_cpu_kernels()
    assert [b.kernel for b in model.blocks] == [None, None]
    assert LightCNN((3, 32, 32), 7).use_cpu_kernels().kernels == [(False, False)] * 3
    assert not any(getattr(m, "winograd", False) for m in model.modules())
    x = torch.randint(0, 256, (2, 1, 28, 28), dtype=torch.uint8)
    assert model(x, torch.zeros(2, 4)).shape == (2, 10)


def test_self_check_runs_once_per_build_and_is_cached_beside_it(fresh_dispatch, monkeypatch):
    calls = fresh_dispatch({"first_block"})
    assert not cpu_kernels.enabled("first_block") and cpu_kernels.enabled("conv_pool")
    library = Path(cpu_kernels.status()["library"])
    record = json.loads(selfcheck.record_path(library).read_text())
    assert record["timings"] == _timings({"first_block"}) and record["key"]["torch"] == torch.__version__
    assert record["key"]["cpu"] == build.cpu_model() and record["measured_at"]
    monkeypatch.setattr(cpu_kernels, "_tried", False)  # a new process: reads the record, measures nothing
    assert not cpu_kernels.enabled("first_block") and len(calls) == 1
    monkeypatch.setattr(cpu_kernels, "_tried", False)
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")  # another torch: stock speed may differ, measure again
    assert cpu_kernels.extension() is not None and len(calls) == 2


def test_decision_rule():
    timings = _timings({"pool_relu"})
    del timings["winograd_64_64"]
    decided = selfcheck.decide(timings)
    assert decided["pool_relu"] is False and decided["winograd_64_64"] is False and decided["first_block"] is True
    near = {name: {"kernel_ms": 0.99, "stock_ms": 1.0} for name in selfcheck.KERNELS}
    assert not any(selfcheck.decide(near).values())  # within 3%: the stock layers
    # a fused kernel must also beat what runs without it, where its component kernels are on
    fused = _timings(set())
    fused["conv_pool"].update(kernel_ms=1.2, alternative_ms=1.0)  # faster than stock (1.5), slower than Winograd + pool
    assert selfcheck.decide(fused)["conv_pool"] is False
    fused["pool_relu"]["kernel_ms"] = 2.0  # the pool kernel off: the alternative is not what would run
    assert selfcheck.decide(fused)["conv_pool"] is True


def test_the_self_check_keeps_the_fastest_run_of_each_side_and_gives_up_on_a_hopeless_kernel(monkeypatch):
    """A run another process preempts only gets slower: the fastest of the interleaved runs counts,
    so a kernel twice as fast stays on though three of its five runs were held up (their median
    would have turned it off). A kernel over 3x slower in two runs is not timed further."""
    scripted = {"winograd_64_64": ([1.0, 4.0, 4.0, 1.0, 4.0], [2.0] * 5), "gn_pool_relu": ([10.0, 10.0], [1.0, 1.0]),
                "winograd_32_32": ([10.0, 1.0, 1.0, 1.0, 1.0], [2.0] * 5)}  # a slow first run alone is no verdict
    fns, runs = {}, {}
    for name in selfcheck.KERNELS:
        kernel, stock = scripted.get(name, ([1.0] * 5, [2.0] * 5))
        fns[name] = tuple(lambda: None for _ in range(3 if name in selfcheck.FUSED else 2))  # distinct closures
        for fn, times in zip(fns[name], (kernel, stock, [2.0] * 5)):
            runs[fn] = iter(t / 1000 for t in times)
    monkeypatch.setattr(selfcheck, "_cases", lambda layers, batch: fns)
    monkeypatch.setattr(selfcheck, "_seconds", lambda fn: next(runs[fn]))
    monkeypatch.setattr(cpu_kernels, "_ext", object())
    timings = selfcheck.measure(cpu_kernels, reps=5)
    assert timings["winograd_64_64"] == {"kernel_ms": 1.0, "stock_ms": 2.0}
    assert timings["gn_pool_relu"] == {"kernel_ms": 10.0, "stock_ms": 1.0}  # two runs each, then given up
    assert timings["winograd_32_32"]["kernel_ms"] == 1.0
    decided = selfcheck.decide(timings)
    assert decided["winograd_64_64"] and decided["winograd_32_32"] and not decided["gn_pool_relu"]


def test_the_real_self_check_times_every_kernel_even_under_no_grad(ext):
    with torch.no_grad():
        timings = selfcheck.measure(cpu_kernels, batch=2, reps=1)
    assert set(timings) == set(selfcheck.KERNELS)
    assert all(v["kernel_ms"] > 0 and v["stock_ms"] > 0 for v in timings.values())
    assert all("alternative_ms" in timings[name] for name in selfcheck.FUSED)


def test_an_unwritable_cache_or_a_foreign_variant_falls_back_to_the_stock_layers(monkeypatch, tmp_path):
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no compiler")
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv(build.CACHE_ENV, str(blocked / "cache"))  # a directory under a file: cannot be made
    with pytest.raises(build.BuildError, match="cannot build"):
        build.compile_variant("portable")
    assert not build.runnable("avx2", {"sse2"}) and build.runnable("portable", set())


def test_unknown_mode_values_warn_and_off_spellings_switch_off():
    code = ("import warnings; from fedcond.models import cpu_kernels; "
            "warnings.simplefilter('error'); assert cpu_kernels.extension() is None; "
            "assert cpu_kernels.status()['mode'] == '0'")
    subprocess.run([sys.executable, "-c", code], env=dict(os.environ, FEDCOND_CPU_KERNELS="off"), check=True)
