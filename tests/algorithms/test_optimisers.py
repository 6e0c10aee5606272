"""The drift-correcting optimisers: FedProx, SCAFFOLD, FedDyn, FedDC, FedProc.

Each round's equations are pinned on a tiny model (4 inputs -> 3 hidden -> 3 classes) whose
clients hold a few samples: batch size >= client size and momentum 0, so every local epoch is one
full-batch gradient step, and the expected parameters and states are computed here from the
papers' formulas with gradients taken independently (torch.func + autograd). The identities with
FedAvg and the falling loss run on the real CNN.
"""

import dataclasses
import math
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fedcond_testing import tagged_dataset
from fedcond.algorithms.base import Context, State
from fedcond.algorithms.fedavg import FedAvg
from fedcond.algorithms.feddc import FedDC
from fedcond.algorithms.feddyn import FedDyn
from fedcond.algorithms.fedproc import FedProc, PrototypeContrastiveLoss, class_feature_sums
from fedcond.algorithms.base import parameter_names, participants
from fedcond.algorithms.fedprox import FedProx
from fedcond.algorithms.scaffold import Scaffold, effective_steps
from fedcond.engine import LoopEngine, SGDConfig, mean_loss
from fedcond.errors import FedcondError
from fedcond.models import ModelSpec
from fedcond.scenarios import make_scenario
from fedcond.scenarios.federation import ClientData, Federation

torch.set_num_threads(1)

LR, EPOCHS = 0.1, 2  # tiny federation: two full-batch steps per round


class TinyNet(nn.Module):
    """x uint8 [B, 1, 2, 2] -> tanh(fc1) [B, 3] -> fc2 [B, 3]; `gain` is a float buffer (no correction terms)."""

    def __init__(self, num_classes: int):
        super().__init__()
        self.fc1 = nn.Linear(4, 3)
        self.fc2 = nn.Linear(3, num_classes)
        self.register_buffer("gain", torch.ones(1))

    def features(self, x, s=None):
        return torch.tanh(self.fc1(x.float().flatten(1) / 255.0 * self.gain))  # [B, 3]

    @property
    def head(self):
        return self.fc2

    def forward(self, x, s=None):
        return self.fc2(self.features(x, s))  # [B, K]


@dataclasses.dataclass(frozen=True)
class TinySpec:
    num_classes: int = 3

    def build(self):
        return TinyNet(self.num_classes)


NAMES = ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")


def tiny_ctx(sizes=(3, 5, 4), seed=0) -> Context:
    """Clients of unequal sizes; labels in {0, 1} only, so class 2 of 3 is absent everywhere."""
    g = torch.Generator().manual_seed(7)
    clients = []
    for n in sizes:
        x = torch.randint(0, 256, (n, 1, 2, 2), dtype=torch.uint8, generator=g)
        y = torch.arange(n) % 2
        clients.append(ClientData(x, y, x[:1], y[:1]))
    fed = Federation("tiny", "tiny", tuple(clients), num_classes=3, input_shape=(1, 2, 2), mean=(0.0,), std=(1.0,))
    return Context(federation=fed, plain_model=TinySpec(), conditioned_model=None,
                   engine=LoopEngine(SGDConfig(lr=LR, momentum=0.0, batch_size=8)), seed=seed, local_epochs=EPOCHS)


def rand_params(seed: int, scale: float = 0.1) -> dict:
    g = torch.Generator().manual_seed(seed)
    ref = TinySpec().build().state_dict()
    return {k: scale * torch.randn(ref[k].shape, generator=g) for k in NAMES}


def data_grad(ctx: Context, i: int, theta: dict) -> dict:
    """nabla L_i(theta): mean cross-entropy over client i's data, by autograd on a functional call."""
    model = TinySpec().build()
    p = {k: theta[k].detach().clone().requires_grad_(True) for k in NAMES}
    c = ctx.federation.clients[i]
    logits = torch.func.functional_call(model, {**p, "gain": theta["gain"]}, (c.x_train,))
    grads = torch.autograd.grad(F.cross_entropy(logits, c.y_train), list(p.values()))
    return dict(zip(NAMES, grads))


def hand_sgd(ctx: Context, i: int, theta0: dict, extra) -> dict:
    """EPOCHS full-batch steps theta <- theta - lr (nabla L_i(theta) + extra(name, theta)); buffers untouched."""
    theta = dict(theta0)
    for _ in range(EPOCHS):
        g = data_grad(ctx, i, theta)
        theta = {k: theta[k] - LR * (g[k] + extra(k, theta)) if k in g else theta[k] for k in theta}
    return theta


def assert_close(a: dict, b: dict, atol=1e-6):
    assert set(a) == set(b)
    for k in a:
        assert torch.allclose(a[k], b[k], atol=atol), (k, (a[k] - b[k]).abs().max())


# ---- shared pieces -----------------------------------------------------------------------------

def test_parameter_names_exclude_buffers_and_keep_the_rng():
    state = torch.random.get_rng_state()
    assert parameter_names(TinySpec()) == NAMES
    assert torch.equal(state, torch.random.get_rng_state())


def test_participants_are_seeded_and_sized():
    ctx = tiny_ctx(sizes=(3, 3, 3, 3, 3, 3))
    assert participants(ctx, 0, 1.0) == tuple(range(6))
    a = participants(ctx, 4, 0.5)
    assert len(a) == 3 and list(a) == sorted(set(a)) and a == participants(ctx, 4, 0.5)
    assert {participants(ctx, r, 0.5) for r in range(10)} != {a}  # rounds draw differently
    assert len(participants(ctx, 0, 0.01)) == 1
    with pytest.raises(FedcondError):
        Scaffold(participation=0.0)


def test_effective_steps_recover_a_constant_gradient_under_momentum():
    g = torch.tensor([0.3, -1.2])
    for beta, k in [(0.0, 4), (0.9, 1), (0.9, 7), (0.5, 3)]:
        p = torch.zeros(2, requires_grad=True)
        opt = torch.optim.SGD([p], lr=0.05, momentum=beta)
        for _ in range(k):
            p.grad = g.clone()
            opt.step()
        assert torch.allclose(-p.detach() / (0.05 * effective_steps(k, beta)), g, atol=1e-6)
    assert effective_steps(5, 0.0) == 5.0


# ---- SCAFFOLD ----------------------------------------------------------------------------------

@pytest.mark.parametrize("server_lr, participation", [(1.0, 1.0), (0.5, 0.5)])
def test_scaffold_round_by_hand(server_lr, participation):
    ctx = tiny_ctx()
    alg = Scaffold(server_lr=server_lr, participation=participation)
    s0 = alg.init(ctx)
    x = {**rand_params(1, 0.5), "gain": s0.models[0]["gain"]}
    c = rand_params(2)
    ci = tuple(rand_params(3 + i) for i in range(3))
    state = State(models=(x,), assignment=s0.assignment, extra={"c": c, "c_clients": ci})
    s1 = alg.round(ctx, state, 0)

    active = participants(ctx, 0, participation)
    n = ctx.federation.sizes().astype(float)
    y = {i: hand_sgd(ctx, i, x, lambda k, th, i=i: c[k] - ci[i][k]) for i in active}  # g - c_i + c
    c_plus = {i: {k: ci[i][k] - c[k] + (x[k] - y[i][k]) / (EPOCHS * LR) for k in NAMES} for i in active}
    n_s = sum(n[i] for i in active)
    avg = {k: sum(n[i] / n_s * y[i][k] for i in active) for k in NAMES}
    want_x = {k: x[k] + server_lr * (avg[k] - x[k]) for k in NAMES}
    want_c = {k: c[k] + sum(n[i] / n.sum() * (c_plus[i][k] - ci[i][k]) for i in active) for k in NAMES}  # over all N

    assert_close({k: s1.models[0][k] for k in NAMES}, want_x)
    assert torch.equal(s1.models[0]["gain"], x["gain"])
    assert_close(s1.extra["c"], want_c)
    for i in range(3):
        assert_close(s1.extra["c_clients"][i], c_plus[i] if i in active else ci[i])
    assert len(active) == (3 if participation == 1.0 else 2)
    assert all(torch.equal(state.extra["c"][k], c[k]) for k in c)  # the input state is untouched


# ---- FedDyn ------------------------------------------------------------------------------------

@pytest.mark.parametrize("participation", [1.0, 0.5])
def test_feddyn_round_by_hand(participation):
    ctx = tiny_ctx()
    alpha = 0.3
    alg = FedDyn(alpha=alpha, participation=participation, max_grad_norm=None)  # clipping: its own test
    s0 = alg.init(ctx)
    theta = {**rand_params(1, 0.5), "gain": s0.models[0]["gain"]}
    h = rand_params(2)
    grad = tuple(rand_params(3 + i) for i in range(3))
    state = State(models=(theta, theta), assignment=s0.assignment, extra={"h": h, "grad": grad})
    s1 = alg.round(ctx, state, 0)

    active = participants(ctx, 0, participation)
    n = ctx.federation.sizes().astype(float)
    a = {k: alpha / (n[k] / n.mean()) for k in range(3)}  # alpha_k = alpha / (n_k / mean n)
    assert a[0] > alpha > a[1]  # the smallest client is held tightest
    # local objective L_k(th) - <grad_k, th> + a_k/2 ||th - theta||^2 -> gradient nabla L_k - grad_k + a_k (th - theta)
    th = {k: hand_sgd(ctx, k, theta, lambda p, t, k=k: -grad[k][p] + a[k] * (t[p] - theta[p])) for k in active}
    want_grad = {k: {p: grad[k][p] - a[k] * (th[k][p] - theta[p]) for p in NAMES} for k in active}
    want_h = {p: h[p] - alpha / 3 * sum(th[k][p] - theta[p] for k in active) for p in NAMES}  # 1/m, m = all 3 clients
    want_theta = {p: sum(th[k][p] for k in active) / len(active) - want_h[p] / alpha for p in NAMES}

    assert_close({p: s1.models[0][p] for p in NAMES}, want_theta, atol=2e-6)
    assert_close(s1.extra["h"], want_h)
    for k in range(3):
        assert_close(s1.extra["grad"][k], want_grad[k] if k in active else grad[k])


def test_feddyn_reports_the_clients_average_and_records_the_server_model():
    """As the authors' code: clients predict with the plain average of the local models; theta^t
    (average - h / alpha), which the next round starts from, is evaluated beside it."""
    ctx = tiny_ctx()
    alg = FedDyn(alpha=0.3)
    s1 = alg.round(ctx, alg.init(ctx), 0)
    theta, average = s1.models
    assert set(s1.assignment) == {1} and s1.alternates == {"server_model": 0}
    assert_close({p: average[p] - s1.extra["h"][p] / 0.3 for p in NAMES}, {p: theta[p] for p in NAMES}, atol=1e-6)
    s2 = alg.round(ctx, s1, 1)
    server = FedDyn(alpha=0.3, evaluate="server")
    t1 = server.round(ctx, server.init(ctx), 0)
    assert set(t1.assignment) == {0} and t1.alternates == {"client_average": 1}
    assert all(torch.equal(a, b) for a, b in zip(t1.models[0].values(), theta.values()))  # same training either way
    assert s2.round == 2
    with pytest.raises(FedcondError):
        FedDyn(evaluate="best")


def test_gradient_clipping_bounds_every_step():
    from fedcond.engine import Job, SGDConfig, train_job

    ctx = tiny_ctx()
    spec = ctx.spec(False)
    model = spec.build()
    c = ctx.federation.clients[0]
    job = Job(params=model.state_dict(), x=c.x_train, y=c.y_train, s=None, epochs=1, seed=(0,))
    free = train_job(spec.build(), job, SGDConfig(momentum=0.0, batch_size=8))
    loose = train_job(spec.build(), job, SGDConfig(momentum=0.0, batch_size=8, max_grad_norm=1e9))
    tight = train_job(spec.build(), job, SGDConfig(momentum=0.0, batch_size=8, max_grad_norm=1e-4))
    assert all(torch.equal(free.params[k], loose.params[k]) for k in free.params)  # a bound never reached changes nothing
    def moved(res):
        return sum(float((res.params[k].double() - job.params[k].double()).norm() ** 2) for k in NAMES) ** 0.5

    assert moved(tight) <= 0.01 * 1e-4 * free.steps * 1.05  # lr * max_norm per step at most (float32 differences)
    assert moved(free) > 100 * moved(tight)


# ---- FedDC -------------------------------------------------------------------------------------

@pytest.mark.parametrize("participation", [1.0, 0.5])
def test_feddc_round_by_hand(participation):
    ctx = tiny_ctx()
    alpha = 0.3
    alg = FedDC(alpha=alpha, participation=participation)
    s0 = alg.init(ctx)
    w = {**rand_params(1, 0.5), "gain": s0.models[0]["gain"]}
    G = rand_params(2)
    Gi = tuple(rand_params(3 + i) for i in range(3))
    hd = tuple(rand_params(6 + i) for i in range(3))
    state = State(models=(w,), assignment=s0.assignment, extra={"g": G, "g_clients": Gi, "drift": hd})
    s1 = alg.round(ctx, state, 0)

    active = participants(ctx, 0, participation)
    n = ctx.federation.sizes().astype(float)
    wt = n / n.mean()
    # L_i(th) + a_i/2 ||th + h_i - w||^2 + <th, G/w_i - G_i>
    th = {i: hand_sgd(ctx, i, w, lambda p, t, i=i: alpha / wt[i] * (t[p] + hd[i][p] - w[p]) + G[p] / wt[i] - Gi[i][p])
          for i in active}
    want_hd = [{p: hd[i][p] + th[i][p] - w[p] for p in NAMES} if i in active else hd[i] for i in range(3)]
    want_Gi = {i: {p: Gi[i][p] - G[p] / wt[i] - (th[i][p] - w[p]) / (EPOCHS * LR) for p in NAMES} for i in active}
    want_G = {p: G[p] + sum(wt[i] * (want_Gi[i][p] - Gi[i][p]) for i in active) / 3 for p in NAMES}
    want_w = {p: sum(th[i][p] for i in active) / len(active) + sum(d[p] for d in want_hd) / 3 for p in NAMES}

    assert_close({p: s1.models[0][p] for p in NAMES}, want_w)
    assert_close(s1.extra["g"], want_G)
    for i in range(3):
        assert_close(s1.extra["drift"][i], want_hd[i])
        assert_close(s1.extra["g_clients"][i], want_Gi[i] if i in active else Gi[i])


# ---- FedProc -----------------------------------------------------------------------------------

def test_fedproc_loss_by_hand():
    torch.manual_seed(0)
    model = TinyNet(3)
    x = torch.randint(0, 256, (4, 1, 2, 2), dtype=torch.uint8)
    y = torch.tensor([0, 1, 2, 1])  # class 2 has no prototype: sample 2 gets cross-entropy only
    protos = F.normalize(torch.randn(3, 3), dim=1)
    present = torch.tensor([True, True, False])
    loss_fn = PrototypeContrastiveLoss(protos, present, contrastive_weight=0.75, temperature=0.5)
    got = float(loss_fn(model, x, None, y).detach())

    W1, b1 = model.fc1.weight.detach().double().numpy(), model.fc1.bias.detach().double().numpy()
    W2, b2 = model.fc2.weight.detach().double().numpy(), model.fc2.bias.detach().double().numpy()
    P = protos.double().numpy()
    ce, pc = [], []
    for b in range(4):
        z = np.tanh(W1 @ (x[b].double().numpy().ravel() / 255.0) + b1)
        logits = W2 @ z + b2
        ce.append(-logits[y[b]] + math.log(np.exp(logits).sum()))
        if y[b] != 2:
            sims = [float(z @ P[k] / np.linalg.norm(z)) / 0.5 for k in (0, 1)]  # cos / tau over present classes
            pc.append(-sims[int(y[b])] + math.log(sum(math.exp(s) for s in sims)))
    want = 0.75 * np.mean(pc) + 0.25 * np.mean(ce)
    assert abs(got - want) < 1e-5

    again = pickle.loads(pickle.dumps(loss_fn))  # jobs travel to worker processes
    assert float(again(model, x, None, y).detach()) == got
    only_ce = dataclasses.replace(loss_fn, contrastive_weight=0.0)
    assert float(only_ce(model, x, None, y).detach()) == pytest.approx(np.mean(ce), abs=1e-5)


def test_fedproc_weight_schedule_and_prototypes():
    alg = FedProc(rounds=20)
    assert [alg.contrastive_weight(r) for r in (0, 5, 20, 30)] == [1.0, 0.75, 0.0, 0.0]
    ctx = tiny_ctx()
    s0 = alg.init(ctx)
    # init: the initial model's pooled class means, normalised; class 2 (held by no one) is absent
    model = TinySpec().build()
    model.load_state_dict(s0.models[0])
    with torch.no_grad():
        z = torch.cat([model.features(c.x_train) for c in ctx.federation.clients]).double()  # [12, 3]
    y = torch.cat([c.y_train for c in ctx.federation.clients])
    for k in (0, 1):
        assert torch.allclose(s0.extra["prototypes"][k].double(), F.normalize(z[y == k].mean(0), dim=0), atol=1e-6)
    assert s0.extra["present"].tolist() == [True, True, False]

    # a round: FedAvg of the local models trained on the hybrid loss, prototypes from those local models
    s1 = alg.round(ctx, s0, 0)
    loss_fn = PrototypeContrastiveLoss(s0.extra["prototypes"], s0.extra["present"], 1.0, alg.temperature)
    jobs = [ctx.job(s0.models[0], (i,), False, seed=(0, i), loss_fn=loss_fn) for i in range(3)]
    local = LoopEngine(ctx.sgd).train(TinySpec(), jobs)
    n = ctx.federation.sizes().astype(float)
    assert_close(s1.models[0], {k: sum(n[i] / n.sum() * local[i].params[k] for i in range(3)) for k in s0.models[0]})
    sums = sum(class_feature_sums(model, local[i].params, c.x_train, c.y_train, None, 3)[0]
               for i, c in enumerate(ctx.federation.clients))
    for k in (0, 1):
        assert torch.allclose(s1.extra["prototypes"][k].double(), F.normalize(sums[k], dim=0), atol=1e-6)
    assert not torch.allclose(s1.extra["prototypes"], s0.extra["prototypes"])


def test_fedproc_class_sums_do_not_depend_on_batching_or_memory_format():
    """The prototype pass runs channels-last batches of 64 for speed; any batching gives the same sums."""
    from fedcond.models.light_cnn import LightCNN

    torch.manual_seed(0)
    model = LightCNN((3, 32, 32), 4)
    params = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randint(0, 256, (150, 3, 32, 32), dtype=torch.uint8)
    y = torch.randint(0, 4, (150,))
    sums, counts = class_feature_sums(model, params, x, y, None, 4)  # channels-last, batches of 64
    whole, whole_counts = class_feature_sums(model, params, x, y, None, 4, batch_size=1000)
    with torch.no_grad():
        z = model.features(x).double()  # NCHW, one batch: the plain reading
    plain = torch.zeros(4, z.shape[1], dtype=torch.float64).index_add(0, y, z)
    assert counts.tolist() == whole_counts.tolist() == torch.bincount(y, minlength=4).double().tolist()
    assert torch.allclose(sums, plain, rtol=1e-5, atol=1e-4) and torch.allclose(whole, plain, rtol=1e-5, atol=1e-4)


# ---- on the real CNN ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tagged_fed():
    data = tagged_dataset(n_train=100, n_test=20)
    return make_scenario("E1", "mnist", lambda n: data, k=2, clients_per_cluster=2, seed=0)  # 4 clients x 25


def cnn_ctx(sc) -> Context:
    fed = sc.federation
    plain = ModelSpec(fed.input_shape, fed.num_classes, 0, "concat", fed.mean, fed.std)
    return Context(federation=fed, plain_model=plain, conditioned_model=None,
                   engine=LoopEngine(SGDConfig(batch_size=16)), seed=0)


def test_fedprox_mu0_and_scaffold_round0_are_fedavg_bitwise(tagged_fed):
    ctx = cnn_ctx(tagged_fed)
    base = FedAvg().round(ctx, FedAvg().init(ctx), 0).models[0]
    for alg in (FedProx(mu=0.0), Scaffold()):
        got = alg.round(ctx, alg.init(ctx), 0).models[0]
        assert all(torch.equal(got[k], base[k]) for k in base), alg
    prox = FedProx(mu=1.0).round(ctx, FedProx().init(ctx), 0).models[0]
    assert not torch.equal(prox["fc2.weight"], base["fc2.weight"])  # the proximal term acts


def learnable_dataset(n_train=160, n_test=20, num_classes=10, seed=0):
    """tagged_dataset's layout, but each class lights its own 7x7 block over faint noise."""
    rng = np.random.default_rng(seed)

    def make(n):
        y = np.arange(n) % num_classes
        x = rng.integers(0, 60, size=(n, 28, 28), dtype=np.uint8)
        for i, c in enumerate(y):
            r, q = divmod(int(c), 4)
            x[i, 7 * r : 7 * r + 7, 7 * q : 7 * q + 7] = 255
        return x, y.astype(np.int64)

    (x_tr, y_tr), (x_te, y_te) = make(n_train), make(n_test)
    return SimpleNamespace(name="blocks", x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te,
                           classes=tuple(str(c) for c in range(num_classes)), coarse_train=None, coarse_test=None,
                           coarse_classes=None)


@pytest.mark.parametrize("alg", [FedProx(), Scaffold(), FedDyn(), FedDC(), FedProc(rounds=3)], ids=lambda a: type(a).__name__)
def test_training_loss_falls_over_three_rounds(alg):
    """The paper protocol's optimiser (lr 0.01, momentum 0.9): the global model's cross-entropy on the
    clients' pooled training data falls over 3 rounds, and so does the reported training loss
    wherever the local objective stays fixed (FedProc's moves from contrastive to cross-entropy)."""
    data = learnable_dataset()
    fed = make_scenario("E1", "mnist", lambda n: data, k=2, clients_per_cluster=2, seed=0).federation
    plain = ModelSpec(fed.input_shape, fed.num_classes, 0, "concat", fed.mean, fed.std)
    ctx = Context(federation=fed, plain_model=plain, conditioned_model=None,
                  engine=LoopEngine(SGDConfig(lr=0.01, momentum=0.9, batch_size=16)), seed=0)
    x, y, _ = ctx.pooled(tuple(range(fed.num_clients)), False)
    model = plain.build()
    state = alg.init(ctx)
    ce, reported = [mean_loss(model, state.models[0], x, y, None)], []
    for r in range(3):
        state = alg.round(ctx, state, r)
        ce.append(mean_loss(model, state.models[0], x, y, None))
        reported.append(state.train_loss)
    assert all(np.isfinite(ce + reported))
    if isinstance(alg, FedProc):  # cross-entropy weighs 0, 1/3, 2/3 over the rounds: it falls, slowly
        assert ce[3] < ce[0], ce
    else:
        assert ce[3] < ce[0] - 0.1, ce
        assert reported[2] < reported[0], reported
