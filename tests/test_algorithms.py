import dataclasses

import numpy as np
import pytest
import torch

from fedcond_testing import DroppingEngine, tagged_dataset
from fedcond.algorithms import ALGORITHMS, Context, make_algorithm, resolve_methods
from fedcond.client_stats import client_statistics
from fedcond.engine import LoopEngine, SGDConfig, batch_order, weighted_average
from fedcond.errors import FedcondError
from fedcond.models import ModelSpec
from fedcond.protocol import Protocol
from fedcond.scenarios import make_scenario
from fedcond.simulate import run_method


def test_weighted_average_by_hand():
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}
    b = {"w": torch.tensor([4.0, 8.0]), "n": torch.tensor(5)}
    avg = weighted_average([a, b], np.array([1, 2]))
    assert torch.allclose(avg["w"], torch.tensor([3.0, 6.0]))  # (1*[1,2] + 2*[4,8]) / 3
    assert int(avg["n"]) == 5


def test_batch_order_covers_every_sample_once_per_epoch_and_is_seeded():
    batches = batch_order(129, 64, 2, (7,))
    assert [len(b) for b in batches] == [64, 65, 64, 65]  # a trailing batch of 1 joins the previous one
    assert [len(b) for b in batch_order(130, 64, 1, (7,))] == [64, 64, 2]
    first = np.concatenate(batches[:2])
    assert sorted(first.tolist()) == list(range(129))
    assert all(np.array_equal(x, y) for x, y in zip(batches, batch_order(129, 64, 2, (7,))))
    assert not np.array_equal(batches[0], batch_order(129, 64, 2, (8,))[0])


@pytest.fixture(scope="module")
def small():
    data = tagged_dataset(n_train=240, n_test=80)
    return make_scenario("E1", "mnist", lambda n: data, k=2, clients_per_cluster=3, seed=0)


def _ctx(sc, conditioned=False, truth=False):
    fed = sc.federation
    stats = client_statistics(sc, Protocol())[1] if conditioned else None
    plain = ModelSpec(fed.input_shape, fed.num_classes, 0, "concat", fed.mean, fed.std)
    return Context(
        federation=fed,
        plain_model=plain,
        conditioned_model=ModelSpec(fed.input_shape, fed.num_classes, 32, "concat", fed.mean, fed.std),
        engine=LoopEngine(SGDConfig(batch_size=16)),
        seed=0,
        stats=stats,
        truth=sc.truth if truth else None,
    )


def test_fedavg_round_is_the_size_weighted_mean_of_local_updates(small):
    ctx = _ctx(small)
    alg = make_algorithm("FedAvg")
    s0 = alg.init(ctx)
    s1 = alg.round(ctx, s0, 0)
    # replay the clients' local training by hand, from the same global weights and batch seeds
    jobs = [ctx.job(s0.models[0], (i,), False, seed=(0, i)) for i in range(small.federation.num_clients)]
    locals_ = LoopEngine(SGDConfig(batch_size=16)).train(ctx.plain_model, jobs)
    expected = weighted_average([r.params for r in locals_], small.federation.sizes())
    for k in expected:
        assert torch.allclose(s1.models[0][k], expected[k], atol=1e-6)
    assert not torch.allclose(s1.models[0]["fc2.weight"], s0.models[0]["fc2.weight"])
    assert s0.models[0]["fc2.weight"].equal(alg.init(ctx).models[0]["fc2.weight"])  # init is seeded


def test_oracle_groups_are_true_clusters_and_local_groups_are_clients(small):
    oracle = make_algorithm("Oracle").init(_ctx(small, truth=True))
    assert oracle.assignment == tuple(int(k) for k in small.truth.cluster) and len(oracle.models) == 2
    local = make_algorithm("Local").init(_ctx(small))
    assert local.assignment == tuple(range(6)) and len(local.models) == 6
    cond = make_algorithm("Conditional").init(_ctx(small, conditioned=True))
    assert cond.assignment == (0,) * 6 and cond.models[0]["fc1.weight"].shape == (128, 3136 + 32)


def test_pooled_rounds_carry_momentum(small):
    ctx = _ctx(small)
    alg = make_algorithm("Local")
    s1 = alg.round(ctx, alg.init(ctx), 0)
    assert all(m is not None and float(m["fc2.weight"].abs().sum()) > 0 for m in s1.momentum)


def test_state_is_not_mutated_in_place(small):
    ctx = _ctx(small)
    alg = make_algorithm("FedAvg")
    s0 = alg.init(ctx)
    before = {k: v.clone() for k, v in s0.models[0].items()}
    alg.round(ctx, s0, 0)
    assert all(torch.equal(before[k], s0.models[0][k]) for k in before)


def test_same_seed_same_numbers(small):
    a = run_method(small, "Conditional-FedAvg", Protocol(epochs=2, batch_size=16), seed=1)
    b = run_method(small, "Conditional-FedAvg", Protocol(epochs=2, batch_size=16), seed=1)
    assert a.per_client == b.per_client and a.train_loss == b.train_loss


@pytest.mark.parametrize("method", ["FedAvg", "Gossip", "IFCA", "Ditto"])
def test_evaluating_along_the_way_leaves_the_run_as_it_was(small, method):
    """eval_every only reads the models: the last round is the run without it, to the bit (the report's
    'best round' reading, report/readings.py, rests on this), and the curve ends at that last round."""
    plain = run_method(small, method, Protocol(epochs=3, batch_size=16), seed=2)
    curved = run_method(small, method, Protocol(epochs=3, batch_size=16, eval_every=1), seed=2)
    assert curved.per_client == plain.per_client and curved.train_loss == plain.train_loss
    curve = curved.extra["curve"]
    assert [r for r, *_ in curve] == [1, 2, 3] and curve[-1][1] == pytest.approx(float(np.mean(plain.per_client)))
    assert curved.extra["best_accuracy"] == max(a for _, a, _ in curve)


def test_rows_keep_which_test_samples_were_right(small):
    from fedcond.results import pack_hits, unpack_hits

    r = run_method(small, "Local", Protocol(epochs=2, batch_size=16), seed=1)
    sizes = [c.n_test for c in small.federation.clients]
    hits = unpack_hits(r.extra["test_hits"])
    assert [h.size for h in hits] == sizes
    assert [float(h.mean()) for h in hits] == pytest.approx(r.per_client, abs=0)
    assert 0 < sum(int(h.sum()) for h in hits) < sum(sizes)  # some right, some wrong: the bits carry information
    odd = [np.arange(n) % 3 == 0 for n in (5, 0, 9)]  # sizes that are not multiples of 8, one empty
    assert all(np.array_equal(a, b) for a, b in zip(unpack_hits(pack_hits(odd)), odd))
    assert unpack_hits(pack_hits([])) == []
    assert r.extra["cluster_of_client"] == [small.truth.cluster_names[k] for k in small.truth.cluster]


def test_methods_resolve():
    assert resolve_methods("all") == ["Local", "FedAvg", "Gossip", "Ditto", "IFCA", "DAC", "Oracle", "Conditional"]
    assert resolve_methods("fedavg,conditional-fedavg") == ["FedAvg", "Conditional-FedAvg"]
    with pytest.raises(FedcondError, match="unknown method"):
        resolve_methods("FedAvg,Nope")
    for name, cls in ALGORITHMS.items():
        alg = make_algorithm(name)
        assert hash(alg) == hash(cls())  # frozen dataclasses: hashable, comparable


def test_names_carry_hyperparameters():
    assert resolve_methods("gossip( independent_init=true ),FedProx(mu=0.1),FedAvg") == [
        "Gossip(independent_init=True)", "FedProx(mu=0.1)", "FedAvg"]
    assert make_algorithm("Gossip(independent_init=True)").independent_init is True
    assert make_algorithm("FedProx(mu=0.25)").mu == 0.25
    assert make_algorithm("IFCA(k=3)", num_clusters=2).k == 3  # the name wins over the true K
    with pytest.raises(FedcondError, match="keys independent_init"):
        resolve_methods("Gossip(foo=1)")
    with pytest.raises(FedcondError, match="unknown method 'Nope'"):
        resolve_methods("Nope(a=1)")


def test_conditional_learns_on_digits():
    """On the embedded digits, E1 K=5: Conditional trains to high accuracy and beats FedAvg."""
    from fedcond import data

    sc = make_scenario("E1", "digits", lambda n: data.load("digits"), k=5, clients_per_cluster=5, seed=0)
    proto = Protocol(epochs=6)
    cond = run_method(sc, "Conditional", proto)
    fedavg = run_method(sc, "FedAvg", proto)
    assert cond.accuracy > 0.9
    assert cond.accuracy > fedavg.accuracy + 0.2


def test_fedavg_carry_momentum_continues_each_clients_optimiser_across_rounds(small):
    """FedAvg(carry_momentum=True): round 2's local training starts each client's SGD from the buffer its
    round-1 training left (replayed by hand); without it the buffers start at zero, as before."""
    ctx = _ctx(small)
    n = small.federation.num_clients
    alg = make_algorithm("FedAvg(carry_momentum=True)")
    s0 = alg.init(ctx)
    s1 = alg.round(ctx, s0, 0)
    s2 = alg.round(ctx, s1, 1)
    engine = LoopEngine(SGDConfig(batch_size=16))
    first = engine.train(ctx.plain_model, [ctx.job(s0.models[0], (i,), False, seed=(0, i), keep_momentum=True)
                                           for i in range(n)])
    assert all(torch.equal(s1.momentum[i][k], first[i].momentum[k]) for i in range(n) for k in first[i].momentum)
    second = engine.train(ctx.plain_model, [ctx.job(s1.models[0], (i,), False, seed=(1, i), momentum=first[i].momentum)
                                            for i in range(n)])
    expected = weighted_average([r.params for r in second], small.federation.sizes())
    assert all(torch.allclose(s2.models[0][k], expected[k], atol=1e-6) for k in expected)
    plain = make_algorithm("FedAvg")
    p2 = plain.round(ctx, plain.round(ctx, plain.init(ctx), 0), 1)
    assert s1.models[0]["fc2.weight"].equal(plain.round(ctx, plain.init(ctx), 0).models[0]["fc2.weight"])
    assert not torch.allclose(s2.models[0]["fc2.weight"], p2.models[0]["fc2.weight"])
    assert p2.momentum == ()


@pytest.mark.parametrize("method", ["FedAvg(carry_momentum=True)", "Gossip(carry_momentum=True)"])
def test_a_client_that_drops_out_keeps_its_momentum_and_the_round_goes_on(small, method):
    """A client with no reply (over Flower: it dropped out) keeps the buffers (and, in Gossip, the model)
    it had before the round; the others' come from their jobs. Before, the round raised on the None."""
    ctx = _ctx(small)
    alg = make_algorithm(method)
    s1 = alg.round(ctx, alg.init(ctx), 0)
    dropping = DroppingEngine(SGDConfig(batch_size=16), client=1, call=1)  # client 1's reply lost in round 2
    s2 = alg.round(dataclasses.replace(ctx, engine=dropping), s1, 1)
    assert s2.momentum[1] is s1.momentum[1]
    assert all(not torch.equal(s2.momentum[i]["fc2.weight"], s1.momentum[i]["fc2.weight"]) for i in (0, 2))
    if method.startswith("Gossip"):  # its partner keeps its own trained model; the other pairs still average
        assert s2.models[1] is s1.models[1]
        pairs = s2.extra["pairs"]
        partner = next((j for a, b in pairs for i, j in ((a, b), (b, a)) if i == 1), None)
        if partner is not None:
            assert s2.models[partner] is not s2.models[1]
            assert not any(torch.equal(s2.models[partner][k], s1.models[1][k]) for k in s1.models[1])
        assert all(s2.models[a] is s2.models[b] for a, b in pairs if 1 not in (a, b))


def test_fedavg_counts_the_momentum_buffers_that_travel_with_its_jobs(small):
    """With carry_momentum the server holds each client's buffers between rounds (a Flower client keeps no
    state), so they cross the wire both ways and the traffic says so; without it, only the weights."""
    from fedcond.algorithms.traffic import Traffic, payload_bytes

    n = small.federation.num_clients
    counted, buffers = {}, 0
    for method in ("FedAvg", "FedAvg(carry_momentum=True)"):
        ctx = dataclasses.replace(_ctx(small), traffic=Traffic(n))
        alg = make_algorithm(method)
        s1 = alg.round(ctx, alg.init(ctx), 0)
        alg.round(ctx, s1, 1)
        counted[method] = (ctx.traffic.down.copy(), ctx.traffic.up.copy())
        buffers = payload_bytes(s1.momentum[0]) if s1.momentum else buffers
    weights = payload_bytes(s1.models[0])
    plain_down, plain_up = counted["FedAvg"]
    carry_down, carry_up = counted["FedAvg(carry_momentum=True)"]
    assert buffers > 0 and (plain_down == 2 * weights).all() and (plain_up == 2 * weights).all()
    assert (carry_up == plain_up + 2 * buffers).all()  # the buffers come back after every round
    assert (carry_down == plain_down + buffers).all()  # and go out from round 2 on (round 1 starts at zero)
