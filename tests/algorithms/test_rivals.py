"""The personalisation rivals of Conditional (issue 45): FedAvg-FT, FedRep, pFedHN, PeFLL.

One equation test each, pinned against what the clients returned (a recording engine) or against
autograd; and a run of all four with held-out clients, each newcomer served as its paper serves it.
"""

import dataclasses

import pytest
import torch
import torch.nn as nn

from fedcond import data
from fedcond.algorithms import make_algorithm
from fedcond.algorithms import hypernet as H
from fedcond.algorithms.fedavg import FedAvg
from fedcond.algorithms.fedavg_ft import FedAvgFT
from fedcond.algorithms.fedrep import FedRep, head_names
from fedcond.algorithms.pefll import PeFLL
from fedcond.algorithms.pfedhn import PFedHN
from fedcond.engine import LoopEngine, SGDConfig, weighted_average
from fedcond.holdout import hold_out
from fedcond.protocol import Protocol
from fedcond.scenarios import make_scenario
from fedcond.simulate import make_context, run_method

PROTOCOL = Protocol(epochs=2, batch_size=32)


@pytest.fixture(scope="module")
def digits():
    """E1 on the embedded digits, K=2, 2 clients per cluster."""
    return make_scenario("E1", "digits", lambda n: data.load("digits"), k=2, clients_per_cluster=2, seed=0)


class Recorder:
    """An engine that keeps every (jobs, results) it was asked for: what the clients sent back."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []

    @property
    def sgd(self):
        return self.engine.sgd

    def train(self, spec, jobs):
        results = self.engine.train(spec, jobs)
        self.calls.append((jobs, results))
        return results


def recorded_ctx(scenario, alg, protocol=PROTOCOL):
    return make_context(scenario, alg, protocol, seed=0,
                        engine=Recorder(LoopEngine(SGDConfig(protocol.lr, protocol.momentum, protocol.batch_size))))


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
    thetas = [H.call(net, {k: v for k, v in leaves.items() if k != "embeddings"}, leaves["embeddings"][i]) for i in order]
    for theta, job in zip(thetas, jobs):  # each client was sent h(v_i; phi)
        assert all(torch.equal(theta[k].detach(), job.params[k]) for k in theta)
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
    # a training client's model is the same forward pass on its own data
    with torch.no_grad():
        assert _equal(state.models[0], alg.generate(ctx, params, scale, c.x_train, c.y_train))


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
    assert dataclasses.asdict(PeFLL())["clients_per_step"] == 5


def _sgd_as_written(params, grads, buf, lr, momentum, weight_decay):
    """hypernet.sgd_step's three lines, one temporary per operation (the step before stop 61)."""
    new_p, new_b = {}, {}
    for k, p in params.items():
        g = grads[k] + weight_decay * p if weight_decay else grads[k]
        b = g.clone() if buf is None else momentum * buf[k] + g
        new_b[k] = b
        new_p[k] = p - (lr[k] if isinstance(lr, dict) else lr) * (b if momentum else g)
    return new_p, new_b


def _adam_as_written(params, grads, state, lr, betas=(0.9, 0.999), eps=1e-8):
    t = 1 if state is None else state["t"] + 1
    m = {k: (1 - betas[0]) * g if state is None else betas[0] * state["m"][k] + (1 - betas[0]) * g
         for k, g in grads.items()}
    v = {k: (1 - betas[1]) * g * g if state is None else betas[1] * state["v"][k] + (1 - betas[1]) * g * g
         for k, g in grads.items()}
    c1, c2 = 1 - betas[0] ** t, 1 - betas[1] ** t
    return {k: p - lr * (m[k] / c1) / ((v[k] / c2).sqrt() + eps) for k, p in params.items()}, {"t": t, "m": m, "v": v}


def test_server_steps_are_their_formulas_bitwise_and_leave_their_inputs_alone():
    """The in-place arithmetic of hypernet.sgd_step / adam_step computes what the formulas say, bit for bit,
    over three steps (first step included), and follows torch.optim.SGD to rounding."""
    gen = torch.Generator().manual_seed(0)
    shapes = {"w": (7, 5), "b": (5,)}
    params = {k: torch.randn(s, generator=gen) for k, s in shapes.items()}
    grads = [{k: torch.randn(s, generator=gen) for k, s in shapes.items()} for _ in range(3)]
    frozen = {k: v.clone() for k, v in params.items()}
    grads_before = [{k: v.clone() for k, v in g.items()} for g in grads]
    for lr, momentum, wd in ((1e-2, 0.9, 1e-3), ({"w": 0.1, "b": 0.2}, 0.0, 0.0), (5e-3, 0.9, 0.0)):
        p_ours, p_ref, b_ours, b_ref = params, params, None, None
        for g in grads:
            p_ours, b_ours = H.sgd_step(p_ours, g, b_ours, lr, momentum, wd)
            p_ref, b_ref = _sgd_as_written(p_ref, g, b_ref, lr, momentum, wd)
            assert _equal(p_ours, p_ref) and _equal(b_ours, b_ref)
        if not isinstance(lr, dict):
            w = {k: v.clone().requires_grad_() for k, v in params.items()}
            opt = torch.optim.SGD(list(w.values()), lr=lr, momentum=momentum, weight_decay=wd, foreach=False)
            for g in grads:
                for k in w:
                    w[k].grad = g[k].clone()
                opt.step()
            for k in w:
                torch.testing.assert_close(w[k].detach(), p_ours[k])
    a_ours, a_ref, s_ours, s_ref = params, params, None, None
    for g in grads:
        a_ours, s_ours = H.adam_step(a_ours, g, s_ours, 2e-4)
        a_ref, s_ref = _adam_as_written(a_ref, g, s_ref, 2e-4)
        assert _equal(a_ours, a_ref) and _equal(s_ours["m"], s_ref["m"]) and _equal(s_ours["v"], s_ref["v"])
    assert _equal(params, frozen) and all(_equal(g, before) for g, before in zip(grads, grads_before))
