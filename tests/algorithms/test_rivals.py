"""The personalisation rivals of Conditional (issue 45): FedAvg-FT, FedRep, pFedHN, PeFLL.

One equation test each, pinned against what the clients returned (a recording engine) or against
autograd; and a run of all four with held-out clients, each newcomer served as its paper serves it.
"""

import dataclasses

import pytest
import torch
import torch.nn as nn
from fedcond_testing import RecordingEngine

from fedcond import data
from fedcond.algorithms import make_algorithm
from fedcond.algorithms import hypernet as H
from fedcond.algorithms.fedavg import FedAvg
from fedcond.algorithms.fedavg_ft import FedAvgFT
from fedcond.algorithms.fedrep import FedRep, head_names
from fedcond.algorithms.pefll import PeFLL
from fedcond.algorithms.pfedhn import PFedHN
from fedcond.engine import SGDConfig, weighted_average
from fedcond.holdout import hold_out
from fedcond.protocol import Protocol
from fedcond.scenarios import make_scenario
from fedcond.simulate import make_context, run_method

PROTOCOL = Protocol(epochs=2, batch_size=32)


@pytest.fixture(scope="module")
def digits():
    """E1 on the embedded digits, K=2, 2 clients per cluster."""
    return make_scenario("E1", "digits", lambda n: data.load("digits"), k=2, clients_per_cluster=2, seed=0)


def recorded_ctx(scenario, alg, protocol=PROTOCOL):
    return make_context(scenario, alg, protocol, seed=0,
                        engine=RecordingEngine(SGDConfig(protocol.lr, protocol.momentum, protocol.batch_size)))


def _equal(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_fedavg_ft_with_no_fine_tuning_is_fedavg_bit_for_bit(digits):
    proto = Protocol(epochs=1, batch_size=32)
    a = run_method(digits, FedAvgFT(finetune_epochs=0), proto, seed=3)
    b = run_method(digits, FedAvg(), proto, seed=3)
    assert a.per_client == b.per_client and a.train_loss == b.train_loss


def test_fedavg_ft_fine_tunes_the_final_global_model_per_client(digits):
    alg = FedAvgFT(finetune_epochs=2)
    ctx = recorded_ctx(digits, alg)
    state = alg.init(ctx)
    for r in range(ctx.rounds):
        state = alg.round(ctx, state, r)
    fedavg_jobs, fedavg_res = ctx.engine.calls[-2]
    ft_jobs, ft_res = ctx.engine.calls[-1]
    w = weighted_average([res.params for res in fedavg_res], ctx.federation.sizes())
    assert _equal(state.models[0], w)
    assert all(_equal(job.params, w) and job.epochs == 2 for job in ft_jobs)  # every client starts from w_R
    assert all(_equal(state.models[state.assignment[i]], ft_res[i].params) for i in range(len(ft_jobs)))


def test_fedrep_averages_bodies_and_keeps_each_clients_head(digits):
    alg = FedRep(head_epochs=2)
    ctx = recorded_ctx(digits, alg)
    state = alg.round(ctx, alg.init(ctx), 0)
    (head_jobs, head_res), (body_jobs, body_res) = ctx.engine.calls
    head, sizes = head_names(ctx.spec(False)), ctx.federation.sizes()
    assert head == {"fc2.weight", "fc2.bias"}
    for job, res in zip(head_jobs, head_res):  # the head update leaves the body as it was
        assert all(torch.equal(job.params[k], res.params[k]) for k in job.params if k not in head)
    for h, job, res in zip(head_res, body_jobs, body_res):  # the body update starts from the new head, keeps it
        assert _equal(job.params, h.params) and all(torch.equal(h.params[k], res.params[k]) for k in head)
    body = weighted_average([{k: v for k, v in res.params.items() if k not in head} for res in body_res], sizes)
    for i, m in enumerate(state.models):
        assert all(torch.equal(m[k], body[k]) for k in body)
        assert all(torch.equal(m[k], body_res[i].params[k]) for k in head)


def test_pfedhn_server_gradient_is_the_vector_jacobian_product_of_delta_theta():
    """(d theta / d phi)^T delta, against the explicit Jacobian, on a tiny hypernetwork."""
    torch.manual_seed(0)
    shapes = {"conv.weight": (2, 1, 2, 2), "fc.bias": (3,)}
    phi = {k: v.detach() for k, v in H.HyperNet(2, 4, 1, shapes).state_dict().items()}
    v = torch.randn(2)
    delta = {k: torch.randn(s) for k, s in shapes.items()}
    net = H.skeleton(lambda: H.HyperNet(2, 4, 1, shapes))
    leaves = {k: t.clone().requires_grad_() for k, t in {**phi, "v": v}.items()}
    theta = H.call(net, {k: t for k, t in leaves.items() if k != "v"}, leaves["v"])
    got = H.vjp([theta], [delta], leaves)

    names = list(leaves)

    def flat_theta(*flat):
        out = H.call(net, dict(zip(names[:-1], flat[:-1])), flat[-1])
        return torch.cat([out[k].reshape(-1) for k in shapes])

    jac = torch.autograd.functional.jacobian(flat_theta, tuple(leaves[n].detach() for n in names))
    d = torch.cat([delta[k].reshape(-1) for k in shapes])  # [T]
    for n, j in zip(names, jac):
        expected = (d @ j.reshape(d.numel(), -1)).reshape(leaves[n].shape)
        torch.testing.assert_close(got[n], expected, rtol=1e-5, atol=1e-6)


def test_pfedhn_step_descends_along_the_clients_deltas(digits):
    """One server step over both clients: phi' = phi - lr (clip(mean_c J_c^T delta_c) + wd phi)."""
    train, _ = hold_out(digits, 1)  # two clients: one step of clients_per_step=2 is the whole round
    alg = PFedHN(clients_per_step=2)
    ctx = recorded_ctx(train, alg)
    state = alg.init(ctx)
    new = alg.round(ctx, state, 0)
    ((jobs, results),) = ctx.engine.calls
    phi = state.extra["phi"]
    order = H.steps_of_round(ctx, 0, 0x9FED, 2)[0]
    net = H.skeleton(alg.builder(ctx))
    leaves = {k: v.clone().requires_grad_() for k, v in phi.items()}
    hyper = {k: v for k, v in leaves.items() if k != "embeddings"}
    batch = H.call(net, hyper, leaves["embeddings"][list(order)])  # the step's clients generated together
    thetas = [{k: t[j] for k, t in batch.items()} for j in range(len(order))]
    for i, theta, job in zip(order, thetas, jobs):  # each client was sent h(v_i; phi)
        assert all(torch.equal(theta[k].detach(), job.params[k]) for k in theta)
        one = H.call(net, hyper, leaves["embeddings"][i])  # the same model generated alone, to rounding
        for k in theta:
            torch.testing.assert_close(one[k].detach(), theta[k].detach(), rtol=1e-6, atol=1e-7)
    deltas = [{k: theta[k].detach() - res.params[k] for k in theta} for theta, res in zip(thetas, results)]
    g = H.vjp(thetas, deltas, leaves)
    g = H.clip({k: v / 2 for k, v in g.items()}, alg.max_grad_norm)
    for k in phi:
        torch.testing.assert_close(new.extra["phi"][k], phi[k] - alg.lr * (g[k] + alg.weight_decay * phi[k]))
    assert new.extra["phi"]["embeddings"].shape == (2, int(1 + 2 / 4))


def test_pefll_descriptor_is_permutation_invariant_and_a_newcomer_is_one_forward_pass(digits):
    train, unseen = hold_out(digits, 1)
    alg = PeFLL()
    ctx = recorded_ctx(train, alg)
    state = alg.round(ctx, alg.init(ctx), 0)
    params, scale = state.extra["params"], state.extra["scale"]
    c = train.federation.clients[0]
    perm = torch.randperm(c.n_train, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        v = alg.descriptor(ctx, params, scale, c.x_train, c.y_train)
        torch.testing.assert_close(alg.descriptor(ctx, params, scale, c.x_train[perm], c.y_train[perm]), v)
        assert not torch.allclose(alg.descriptor(ctx, params, scale, c.x_train, (c.y_train + 1) % 10), v)  # y enters
    calls = len(ctx.engine.calls)
    newcomer = unseen.clients[0]
    served = alg.serve_newcomer(ctx, state, newcomer, unseen.ids[0])
    assert len(ctx.engine.calls) == calls  # no training
    net = H.skeleton(alg.nets(ctx)[1])
    with torch.no_grad():
        expected = H.call(net, {k[6:]: t for k, t in params.items() if k.startswith("hyper.")},
                          alg.descriptor(ctx, params, scale, newcomer.x_train, newcomer.y_train))
    assert _equal(served, expected)
    # a training client's model is the same forward pass on its own data (generated among the others: to rounding)
    with torch.no_grad():
        alone = alg.generate(ctx, params, scale, c.x_train, c.y_train)
    assert state.models[0].keys() == alone.keys()
    for k in alone:
        torch.testing.assert_close(state.models[0][k], alone[k], rtol=1e-6, atol=1e-7)


def test_pefll_gradient_reaches_the_embedding_network(digits):
    alg = PeFLL(clients_per_step=4)
    ctx = recorded_ctx(digits, alg)
    state = alg.init(ctx)
    new = alg.round(ctx, state, 0)
    changed = {k for k in state.extra["params"] if not torch.equal(state.extra["params"][k], new.extra["params"][k])}
    assert any(k.startswith("embed.") for k in changed) and any(k.startswith("hyper.") for k in changed)


def test_newcomers_are_served_by_the_fine_tuners_from_the_global_model(digits):
    train, unseen = hold_out(digits, 1)
    for alg in (FedAvgFT(finetune_epochs=1), FedRep(head_epochs=1)):
        ctx = recorded_ctx(train, alg)
        state = alg.init(ctx)
        for r in range(ctx.rounds):
            state = alg.round(ctx, state, r)
        before = len(ctx.engine.calls)
        alg.serve_newcomer(ctx, state, unseen.clients[0], unseen.ids[0])
        ((job,), _) = ctx.engine.calls[before]
        assert job.x is unseen.clients[0].x_train and job.epochs == 1
        head = head_names(ctx.spec(False))
        kept = state.models[0] if isinstance(alg, FedAvgFT) else {k: v for k, v in state.models[0].items() if k not in head}
        assert all(torch.equal(job.params[k], v) for k, v in kept.items())


def test_pfedhn_newcomer_fits_only_its_embedding(digits):
    train, unseen = hold_out(digits, 1)
    alg = PFedHN(newcomer_steps=2)
    ctx = recorded_ctx(train, alg)
    state = alg.round(ctx, alg.init(ctx), 0)
    phi = {k: v.clone() for k, v in state.extra["phi"].items()}
    served = alg.serve_newcomer(ctx, state, unseen.clients[0], unseen.ids[0])
    assert all(torch.equal(phi[k], state.extra["phi"][k]) for k in phi)  # phi frozen
    jobs = [job for jobs, _ in ctx.engine.calls[-2:] for job in jobs]
    assert [job.x is unseen.clients[0].x_train for job in jobs] == [True, True]
    assert served.keys() == state.models[0].keys()
    assert not any(torch.equal(served["fc2.bias"], m["fc2.bias"]) for m in state.models)  # its own embedding


@pytest.mark.parametrize("name", ["FedAvg-FT(finetune_epochs=1)", "FedRep(head_epochs=1)", "pFedHN", "PeFLL"])
def test_rivals_run_by_name_and_serve_newcomers(digits, name):
    res = run_method(digits, name, Protocol(epochs=1, batch_size=32, holdout_clients=1), seed=0)
    assert len(res.per_client) == 2 and 0.0 <= res.accuracy <= 1.0
    assert 0.0 <= res.extra["unseen_accuracy"] <= 1.0 and len(res.extra["unseen_per_client"]) == 2


def test_rivals_hyperparameters_by_name():
    assert make_algorithm("FedRep(head_epochs=3)") == FedRep(head_epochs=3)
    assert make_algorithm("pfedhn(embed_dim=4)") == PFedHN(embed_dim=4)
    assert make_algorithm("FedAvg-FT(finetune_epochs=0)") == FedAvgFT(0)
    assert dataclasses.asdict(PeFLL())["clients_per_step"] == 1  # not the code's 5 (docs/choices.md)


@pytest.mark.parametrize("fused", [True, False])
def test_server_steps_are_torch_optimisers_steps_in_place(monkeypatch, fused):
    """hypernet.sgd_step / adam_step are torch.optim.SGD's / Adam's steps bit for bit (the fused kernel, or with
    FEDCOND_FUSED_SERVER_STEP=0 the single-tensor step), over three steps, first included, with per-name rates;
    they update the parameters and the optimiser state in place and leave the gradients alone."""
    monkeypatch.setenv(H.FUSED_ENV, "1" if fused else "0")
    if fused and not H.fused("cpu"):
        pytest.skip("this torch has no fused CPU optimiser kernels")
    gen = torch.Generator().manual_seed(0)
    shapes = {"w": (7, 5), "b": (5,)}
    params = {k: torch.randn(s, generator=gen) for k, s in shapes.items()}
    grads = [{k: torch.randn(s, generator=gen) for k, s in shapes.items()} for _ in range(3)]
    grads_before = [{k: v.clone() for k, v in g.items()} for g in grads]
    flags = {"fused": True} if fused else {"foreach": False}
    for lr, momentum, wd in ((1e-2, 0.9, 1e-3), ({"w": 0.1, "b": 0.2}, 0.0, 0.0), (5e-3, 0.9, 0.0)):
        ours, buf = {k: v.clone() for k, v in params.items()}, None
        w = {k: v.clone().requires_grad_() for k, v in params.items()}
        rates = lr if isinstance(lr, dict) else dict.fromkeys(w, lr)
        opt = torch.optim.SGD([{"params": [w[k]], "lr": rates[k]} for k in w], lr=1.0, momentum=momentum,
                              weight_decay=wd, **flags)
        for g in grads:
            stepped, buf = H.sgd_step(ours, g, buf, lr, momentum, wd)
            assert stepped is ours  # in place
            for k in w:
                w[k].grad = g[k].clone()
            opt.step()
            assert _equal(ours, {k: v.detach() for k, v in w.items()})
            if momentum:
                assert _equal(buf, {k: opt.state[w[k]]["momentum_buffer"] for k in w})
            else:
                assert buf is None
    ours, state = {k: v.clone() for k, v in params.items()}, None
    w = {k: v.clone().requires_grad_() for k, v in params.items()}
    opt = torch.optim.Adam(list(w.values()), lr=2e-4, **flags)
    for t, g in enumerate(grads, 1):
        stepped, state = H.adam_step(ours, g, state, 2e-4)
        assert stepped is ours and state["t"] == t
        for k in w:
            w[k].grad = g[k].clone()
        opt.step()
        assert _equal(ours, {k: v.detach() for k, v in w.items()})
        assert _equal(state["m"], {k: opt.state[w[k]]["exp_avg"] for k in w})
        assert _equal(state["v"], {k: opt.state[w[k]]["exp_avg_sq"] for k in w})
    assert all(_equal(g, before) for g, before in zip(grads, grads_before))


@pytest.mark.parametrize("name", ["pFedHN", "PeFLL"])
def test_hypernetwork_rounds_leave_the_state_they_were_given_alone(digits, name):
    """The server's steps update in place, on the round's own copy: the state a round starts from is unchanged
    (an earlier State stays valid), and two rounds from it give the same result."""
    alg = make_algorithm(name)
    ctx = recorded_ctx(digits, alg)
    state = alg.round(ctx, alg.init(ctx), 0)  # momentum / Adam's moments exist from here on
    key = "phi" if name == "pFedHN" else "params"
    before = {k: v.clone() for k, v in state.extra[key].items()}
    moments = state.extra["momentum" if name == "pFedHN" else "adam"]
    moments_before = {k: v.clone() for k, v in (moments if name == "pFedHN" else moments["m"]).items()}
    one, two = alg.round(ctx, state, 1), alg.round(ctx, state, 1)
    assert _equal(state.extra[key], before)
    assert _equal(moments if name == "pFedHN" else moments["m"], moments_before)
    assert _equal(one.extra[key], two.extra[key]) and not _equal(one.extra[key], before)


def test_pefll_embedding_adds_the_label_planes_as_a_bias_the_same_function_as_convolving_them():
    """EmbedNet's conv1 over [x, one-hot planes] is computed as conv1 over x plus each label's kernel sum:
    the literal concatenation gives the same embeddings and the same gradients, to rounding."""
    from fedcond.algorithms.pefll import EmbedNet

    torch.manual_seed(0)
    for shape in ((1, 28, 28), (3, 32, 32)):
        net = EmbedNet(shape, 10, 6, (0.5,) * shape[0], (0.25,) * shape[0])
        x = torch.randint(0, 256, (9, *shape), dtype=torch.uint8)
        y = torch.randint(0, 10, (9,))

        def literal(net=net, x=x, y=y):
            z = (x.float() / 255.0 - 0.5) / 0.25
            onehot = torch.nn.functional.one_hot(y, 10).float()[:, :, None, None].expand(-1, -1, *z.shape[2:])
            h = torch.nn.functional.max_pool2d(torch.relu(net.conv1(torch.cat([z, onehot], dim=1))), 2)
            h = torch.nn.functional.max_pool2d(torch.relu(net.conv2(h)), 2).flatten(1)
            return net.fc3(torch.relu(net.fc2(torch.relu(net.fc1(h)))))

        ours, ref = net(x, y), literal()
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
        g_ours = torch.autograd.grad(ours.square().sum(), list(net.parameters()))
        g_ref = torch.autograd.grad(ref.square().sum(), list(net.parameters()))
        for a, b in zip(g_ours, g_ref):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
