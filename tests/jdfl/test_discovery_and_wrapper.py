"""JDFL's discovery (planted domains are recovered), the wrapper's identities and its wiring."""

import numpy as np
import pytest
import torch
from sklearn.metrics import adjusted_rand_score

from fedcond import data
from fedcond.algorithms import canonical_name, make_algorithm, resolve_methods
from fedcond.algorithms.base import Context
from fedcond.engine import LoopEngine, SGDConfig
from fedcond.errors import FedcondError
from fedcond.jdfl import JDFL, DiscoveryConfig, discover, elbow
from fedcond.jdfl.discovery import layer_names, update_snapshots
from fedcond.algorithms.base import HeadLoss
from fedcond.jdfl.targets import JointLabelLoss
from fedcond.models import ModelSpec
from fedcond.protocol import PAPER
from fedcond.scenarios import make_scenario
from fedcond.simulate import run_method


def ctx_for(sc, batch_size=32, seed=0) -> Context:
    fed = sc.federation
    plain = ModelSpec(fed.input_shape, fed.num_classes, 0, "concat", fed.mean, fed.std)
    return Context(federation=fed, plain_model=plain, conditioned_model=None,
                   engine=LoopEngine(SGDConfig(lr=0.01, momentum=0.9, batch_size=batch_size)), seed=seed)


@pytest.fixture(scope="module")
def rotated_digits():
    """A planted federation: embedded digits under 4 rotations (0/90/180/270), 3 clients per domain."""
    return make_scenario("E2b", "digits", lambda n: data.load("digits"), rotations="C3", clients_per_cluster=3, seed=0)


def test_elbow_rule():
    assert elbow(np.array([100.0, 40.0, 10.0, 8.0, 7.0, 6.0])) == 3
    assert elbow(np.array([100.0, 20.0, 15.0, 12.0, 10.0])) == 2
    assert elbow(np.array([5.0, 5.0, 5.0])) == 1  # flat: no structure


def test_layer_subsets_by_module():
    light = ModelSpec((3, 112, 112), 7).build()
    assert layer_names(light, "A") == ("head.weight", "head.bias")
    assert layer_names(light, "B") == ("blocks.2.0.weight", "blocks.2.0.bias", "blocks.2.1.weight", "blocks.2.1.bias",
                                       "head.weight", "head.bias")
    assert set(layer_names(light, "C")) > set(layer_names(light, "B"))
    assert all(n.startswith(("blocks.1", "blocks.2", "head")) for n in layer_names(light, "C"))
    mnist = ModelSpec((1, 28, 28), 10).build()
    assert layer_names(mnist, "A") == ("fc2.weight", "fc2.bias")  # the paper CNN's head
    assert layer_names(mnist, "B") == ("blocks.1.conv.weight", "blocks.1.conv.bias", "fc2.weight", "fc2.bias")


def test_discovery_recovers_planted_domains(rotated_digits):
    ctx = ctx_for(rotated_digits)
    truth = rotated_digits.truth.cluster
    fixed = discover(ctx, DiscoveryConfig(e0=2, slots=4))
    assert adjusted_rand_score(truth, fixed.domains) == 1.0
    assert fixed.centroid_cos.shape == (4, 4) and np.allclose(np.diag(fixed.centroid_cos), 1.0)
    found = discover(ctx, DiscoveryConfig(e0=2))  # M from the elbow
    assert found.slots == found.elbow == 4 and adjusted_rand_score(truth, found.domains) == 1.0
    assert len(found.inertia) == 8 and all(a >= b for a, b in zip(found.inertia, found.inertia[1:]))


def test_discovery_snapshots_equal_shorter_trainings(rotated_digits):
    """E0 = 1 is the first snapshot of an E0 = 2 training (chained one-epoch jobs, momentum carried)."""
    ctx = ctx_for(rotated_digits)
    w0a, one = update_snapshots(ctx, 1)
    w0b, two = update_snapshots(ctx, 2)
    assert all(torch.equal(w0a[k], w0b[k]) for k in w0a)
    assert all(torch.equal(one[0][i][k], two[0][i][k]) for i in range(len(one[0])) for k in one[0][i])
    assert not torch.equal(two[0][0]["fc2.weight"], two[1][0]["fc2.weight"])


BASES = ("FedAvg", "SCAFFOLD", "FedDyn", "FedDC", "FedProc")


@pytest.mark.parametrize("base", BASES)
def test_one_pseudo_domain_is_the_base_algorithm_bitwise(rotated_digits, base):
    ctx = ctx_for(rotated_digits)
    plain = make_algorithm(base)
    wrapped = make_algorithm(f"{base}+jdfl-graded(M=1)")
    s1, s2 = plain.init(ctx), wrapped.init(ctx)
    for r in range(2):
        s1, s2 = plain.round(ctx, s1, r), wrapped.round(ctx, s2, r)
    for k in s1.models[0]:
        assert torch.equal(s1.models[0][k], s2.models[0][k]), (base, k)
    assert s1.train_loss == s2.train_loss


@pytest.mark.parametrize("base", BASES)
def test_expanded_head_trains_with_the_targets(rotated_digits, base):
    """M = 4: the base trains an M x C head; every job's loss (FedProc: its classification term)
    is the client's JDFL target; the run is deterministic."""
    ctx = ctx_for(rotated_digits)
    alg = make_algorithm(f"{base}+jdfl-random(M=4,e0=1)")
    state = alg.init(ctx)
    assert state.models[0][next(k for k in state.models[0] if k.endswith("fc2.weight"))].shape[0] == 4 * 10
    inner = alg.context(ctx, state.extra["jdfl"])
    job = inner.job(state.models[0], (5,), False, seed=(0, 5))
    loss = job.loss_fn if isinstance(job.loss_fn, HeadLoss) else None
    assert loss is not None and loss.targets.own == state.extra["jdfl"].domains[5] and loss.targets.slots == 4
    a = alg.round(ctx, state, 0)
    b = alg.round(ctx, state, 0)
    assert all(torch.equal(a.models[0][k], b.models[0][k]) for k in a.models[0])
    assert np.isfinite(a.train_loss)
    if base == "FedProc":  # its own loss_fn, with the JDFL targets as its classification term
        from fedcond.algorithms.fedproc import PrototypeContrastiveLoss

        seen = []
        real_train = inner.engine.train

        def spy(spec, jobs):
            seen.extend(jobs)
            return real_train(spec, jobs)

        object.__setattr__(ctx, "engine", type("Spy", (), {"train": staticmethod(spy), "sgd": ctx.engine.sgd})())
        alg.round(ctx, state, 0)
        assert all(isinstance(j.loss_fn, PrototypeContrastiveLoss) and isinstance(j.loss_fn.classification, JointLabelLoss)
                   for j in seen)


def test_run_records_pseudo_domains_ari_and_per_domain_accuracy(rotated_digits):
    proto = PAPER.replace(epochs=2, batch_size=32)
    res = run_method(rotated_digits, "FedAvg+jdfl-graded(e0=2)", proto, seed=0)
    assert res.extra["pseudo_domains"] == 4 and res.extra["ari"] == 1.0
    assert set(res.extra["cluster_accuracy"]) == set(rotated_digits.truth.cluster_names)
    assert 0.0 <= res.weighted_accuracy <= 1.0 and res.hyperparameters["scheme"] == "graded"
    # FedAvg's only hyper-parameters: the server's update, at plain averaging
    assert res.hyperparameters["base"]["server_opt"] == "avg" and res.hyperparameters["base"]["server_lr"] is None


def test_method_names():
    alg = make_algorithm("scaffold+JDFL-graded")
    assert isinstance(alg, JDFL) and type(alg.base).__name__ == "Scaffold" and alg.scheme == "graded"
    assert make_algorithm("fedavg+expanded-hard").scheme == "hard"
    alg = make_algorithm("FedProc+jdfl-random(M=3, e0=2, layers=C)")
    assert (alg.slots, alg.e0, alg.layers, alg.scheme) == (3, 2, "C", "random")
    assert canonical_name("feddyn+jdfl-random( M=3 )") == "FedDyn+jdfl-random(M=3)"
    assert resolve_methods("fedavg, fedavg+jdfl-graded(M=2,e0=1), FedDC+jdfl-random") == [
        "FedAvg", "FedAvg+jdfl-graded(M=2,e0=1)", "FedDC+jdfl-random"]
    for bad in ("ditto+jdfl-graded", "fedavg+jdfl-soft", "fedavg+jdfl-graded(Q=1)", "fedavg+jdfl-graded(layers=D)",
                "fedavg+jdfl-graded(M=0)"):
        with pytest.raises(FedcondError):
            make_algorithm(bad)


def test_replicated_head_starts_as_the_base(rotated_digits):
    """init=replicate: the base's own initial weights, its C-way head tiled over the M slots, so the
    collapsed (sum) prediction at the start is the base's softmax, exactly."""
    import torch.nn.functional as F

    from fedcond.jdfl.targets import collapse

    ctx = ctx_for(rotated_digits)
    base0 = ctx.init_params(False)
    alg = make_algorithm("FedAvg+jdfl-graded(M=4,e0=1,init=replicate)")
    assert alg.head_init == "replicate"
    w = alg.init(ctx).models[0]
    assert all(torch.equal(w[k], base0[k]) for k in base0 if not k.startswith("fc2."))
    assert torch.equal(w["fc2.weight"], base0["fc2.weight"].repeat(4, 1)) and w["fc2.bias"].shape == (40,)
    x = rotated_digits.federation.clients[0].x_test[:16]
    big, small = ModelSpec((1, 28, 28), 40, mean=ctx.plain_model.mean, std=ctx.plain_model.std).build(), ctx.plain_model.build()
    big.load_state_dict(w), small.load_state_dict(base0)
    big.eval(), small.eval()
    with torch.no_grad():
        assert torch.allclose(collapse(big(x), 4), F.softmax(small(x), 1), atol=1e-6)
    fresh = make_algorithm("FedAvg+jdfl-graded(M=4,e0=1)").init(ctx).models[0]
    assert not torch.equal(fresh["fc2.weight"][10:20], base0["fc2.weight"])  # fresh: the other slots are new draws
    with pytest.raises(FedcondError):
        make_algorithm("FedAvg+jdfl-graded(init=zeros)")


@pytest.mark.parametrize("base", ["FedAvg", "FedProc"])
def test_random_scheme_drawn_per_sample_reaches_the_jobs_loss(rotated_digits, base):
    """draw=sample: every job's loss fixes each sample's slot (FedProc's classification term too)."""
    ctx = ctx_for(rotated_digits)
    alg = make_algorithm(f"{base}+jdfl-random(M=4,e0=1,draw=sample)")
    assert alg.draw == "sample" and canonical_name(f"{base}+jdfl-random(M=4,e0=1,draw=sample)").endswith("draw=sample)")
    state = alg.init(ctx)
    a = alg.round(ctx, state, 0)
    b = alg.round(ctx, state, 0)
    assert all(torch.equal(a.models[0][k], b.models[0][k]) for k in a.models[0]) and np.isfinite(a.train_loss)
    inner = alg.context(ctx, state.extra["jdfl"])
    assert inner.loss_hook((5,), (0, 5)).draw == "sample"
    with pytest.raises(FedcondError):
        make_algorithm("FedAvg+jdfl-random(draw=epoch)")
    with pytest.raises(FedcondError):
        make_algorithm("FedAvg+jdfl-graded(draw=sample)")
