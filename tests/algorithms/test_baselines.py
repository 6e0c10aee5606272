"""The personalised and clustered baselines (SPEC A.5): Gossip, Ditto, IFCA, DAC and DAC-loss.

Each equation is pinned on a case small enough to check by hand, or against an independent
replay (same jobs, same seeds) of the local training the algorithm asked the engine for.
"""

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedcond_testing import tagged_dataset
from fedcond.algorithms.base import Context, hyperparameters
from fedcond.algorithms.dac import (DAC, DACLoss, cosine_matrix, sampling_probabilities, softmax, top_k_peers,
                                    parameter_names, two_hop_priors)
from fedcond.algorithms.ditto import PERSONAL, Ditto
from fedcond.algorithms.fedavg import FedAvg
from fedcond.algorithms.gossip import PAIRING, Gossip, random_pairs, sequential_pairs
from fedcond.algorithms.ifca import FIRST_DRAW, IFCA
from fedcond.engine import LoopEngine, SGDConfig, batch_order, mean_loss, weighted_average
from fedcond.errors import FedcondError
from fedcond.models import ModelSpec
from fedcond.scenarios import make_scenario
from fedcond.simulate import ari

torch.set_num_threads(1)

SGD = SGDConfig(batch_size=16)


@pytest.fixture(scope="module")
def small():
    """E1, K=2, 3 clients per cluster, 40 training samples each: cluster 0 sees 5 classes, cluster 1 the other 5."""
    data = tagged_dataset(n_train=240, n_test=80)
    return make_scenario("E1", "mnist", lambda n: data, k=2, clients_per_cluster=3, seed=0)


def make_ctx(scenario, clients=None, engine=None, seed=0):
    fed = scenario.federation
    if clients is not None:
        fed = dataclasses.replace(fed, clients=tuple(fed.clients[i] for i in clients))
    return Context(
        federation=fed,
        plain_model=ModelSpec(fed.input_shape, fed.num_classes, 0, "concat", fed.mean, fed.std),
        conditioned_model=None,
        engine=engine or LoopEngine(SGD),
        seed=seed,
    )


def replay_local(ctx, models, r):
    """Client i's local update from models[i], as an independent engine would run it."""
    jobs = [ctx.job(models[i], (i,), False, seed=(r, i)) for i in range(ctx.federation.num_clients)]
    return [res.params for res in LoopEngine(SGD).train(ctx.plain_model, jobs)]


def assert_same(a, b):
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --- conventions -------------------------------------------------------------------------------

@pytest.mark.parametrize("cls", [Gossip, Ditto, IFCA, DAC, DACLoss])
def test_hyperparameters_only_and_hashable(cls):
    alg = cls()
    assert hash(alg) == hash(cls()) and isinstance(hyperparameters(alg), dict)
    assert (cls.conditioned, cls.needs_truth, cls.federated) == (False, False, True)


def test_bad_hyperparameters_are_refused():
    for make in (lambda: IFCA(k=0), lambda: IFCA(refine_rounds=0), lambda: Ditto(lam=-1), lambda: DAC(clusters=0),
                 lambda: DACLoss(aggregation="mean"), lambda: DACLoss(n_sampled=0)):
        with pytest.raises(FedcondError):
            make()


@pytest.mark.parametrize("alg", [Gossip(independent_init=False), Ditto(personal_epochs=2), IFCA(), DAC(), DACLoss(n_sampled=2)],
                         ids=lambda a: type(a).__name__)
def test_training_loss_falls_over_three_rounds(small, alg):
    ctx = make_ctx(small)
    s0 = alg.init(ctx)
    before = {k: v.clone() for k, v in s0.models[0].items()}
    state, losses = s0, []
    for r in range(3):
        state = alg.round(ctx, state, r)
        losses.append(state.train_loss)
    assert losses[2] < losses[0], losses
    assert all(torch.equal(before[k], s0.models[0][k]) for k in before)  # State is never mutated in place
    n = small.federation.num_clients
    assert len(state.assignment) == n and all(0 <= a < len(state.models) for a in state.assignment)


# --- Gossip ------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 5, 6, 9])
def test_random_pairs_are_a_perfect_matching(n):
    for r in range(20):
        pairs = random_pairs(n, np.random.default_rng(r))
        flat = [c for p in pairs for c in p]
        assert len(pairs) == n // 2 and len(set(flat)) == len(flat) == 2 * (n // 2) and set(flat) <= set(range(n))
    assert len({random_pairs(6, np.random.default_rng(r)) for r in range(50)}) > 5  # random, not a fixed pairing


def test_gossip_averages_each_pair_exactly_and_the_odd_one_keeps_its_model(small):
    ctx = make_ctx(small, clients=range(5))  # odd: one client sits out
    alg = Gossip()
    s0 = alg.init(ctx)
    s1 = alg.round(ctx, s0, 0)
    trained = replay_local(ctx, s0.models, 0)
    pairs = random_pairs(5, np.random.default_rng(np.random.SeedSequence([ctx.seed, PAIRING, 0])))
    assert s1.extra["pairs"] == pairs and len(pairs) == 2
    for i, j in pairs:
        for key in trained[i]:
            half = (trained[i][key] + trained[j][key]) / 2  # float32: one rounding, as float64 then cast
            assert torch.equal(s1.models[i][key], half) and torch.equal(s1.models[j][key], half)
    (odd,) = set(range(5)) - {c for p in pairs for c in p}
    assert_same(s1.models[odd], trained[odd])
    assert s1.assignment == tuple(range(5))


@pytest.mark.parametrize("n", [2, 5, 6])
def test_sequential_pairs_give_every_client_one_call_to_another(n):
    for r in range(20):
        pairs = sequential_pairs(n, np.random.default_rng(r))
        assert len(pairs) == n and sorted(i for i, _ in pairs) == list(range(n))  # each client calls once
        assert all(i != j and 0 <= j < n for i, j in pairs)
    peers = [j for r in range(400) for i, j in sequential_pairs(3, np.random.default_rng(r)) if i == 0]
    assert set(peers) == {1, 2} and abs(peers.count(1) - 200) < 50  # uniform over the others


def test_sequential_gossip_averages_in_order_so_a_model_travels_within_a_round(small):
    """pairing=sequential: the pairs are averaged one after another from the locally trained models,
    so a client met twice carries the first average into the second."""
    ctx = make_ctx(small, clients=range(4))
    alg = Gossip(pairing="sequential")
    s0 = alg.init(ctx)
    s1 = alg.round(ctx, s0, 0)
    models = replay_local(ctx, s0.models, 0)
    pairs = sequential_pairs(4, np.random.default_rng(np.random.SeedSequence([ctx.seed, PAIRING, 0])))
    assert s1.extra["pairs"] == pairs
    for i, j in pairs:
        half = {k: (models[i][k] + models[j][k]) / 2 for k in models[i]}
        models[i] = models[j] = half
    for i in range(4):
        for key in models[i]:
            assert torch.equal(s1.models[i][key], models[i][key])  # float32 halves: one rounding, as weighted_average
    with pytest.raises(FedcondError, match="Gossip pairing must be matching or sequential"):
        Gossip(pairing="ring")


# --- Ditto -------------------------------------------------------------------------------------

def test_ditto_global_track_is_fedavg_bit_for_bit(small):
    ctx = make_ctx(small)
    ditto, fedavg = Ditto(personal_epochs=1), FedAvg()
    d, f = ditto.init(ctx), fedavg.init(ctx)
    for r in range(2):
        d, f = ditto.round(ctx, d, r), fedavg.round(ctx, f, r)
        assert_same(d.models[0], f.models[0])
    assert d.assignment == tuple(range(1, 7)) and len(d.models) == 7  # clients predict with their personal models
    assert not torch.equal(d.models[1]["fc2.weight"], d.models[0]["fc2.weight"])


def test_ditto_global_momentum_sets_only_the_global_tracks_optimiser(small):
    """global_momentum=0 (the other reading of "plain SGD"): the global track is FedAvg under SGD
    without momentum, bit for bit; the default keeps the protocol's momentum."""
    plain = make_ctx(small, engine=LoopEngine(dataclasses.replace(SGD, momentum=0.0)))
    ctx = make_ctx(small)
    d = Ditto(personal_epochs=1, global_momentum=0.0)
    d_state, f_state = d.round(ctx, d.init(ctx), 0), FedAvg().round(plain, FedAvg().init(plain), 0)
    assert_same(d_state.models[0], f_state.models[0])
    default = Ditto(personal_epochs=1).round(ctx, Ditto(personal_epochs=1).init(ctx), 0)
    assert not torch.equal(default.models[0]["fc2.weight"], d_state.models[0]["fc2.weight"])
    with pytest.raises(FedcondError):
        Ditto(global_momentum=1.0)


def test_ditto_personal_update_is_proximal_plain_sgd_by_hand(small):
    lam, epochs = 50.0, 2  # a large lam so the proximal pull is far above float noise (lr * lam = 0.5)
    ctx = make_ctx(small, clients=[0, 3])
    alg = Ditto(lam=lam, personal_epochs=epochs)
    s1 = alg.round(ctx, alg.init(ctx), 0)
    s2 = alg.round(ctx, s1, 1)  # round 1: v_i != w, so the anchor matters
    w = s1.models[0]
    model = ctx.plain_model.build()

    def by_hand(i, mu):
        v = {k: t.clone() for k, t in s1.models[1 + i].items()}
        client = ctx.federation.clients[i]
        for idx in batch_order(client.n_train, SGD.batch_size, epochs, (ctx.seed, 1, i, PERSONAL)):
            model.load_state_dict(v)
            model.zero_grad()
            idx_t = torch.from_numpy(idx)
            F.cross_entropy(model(client.x_train[idx_t]), client.y_train[idx_t]).backward()
            with torch.no_grad():  # v <- v - lr (grad f_i(v) + lam (v - w)), no momentum
                v = {name: p - SGD.lr * (p.grad + mu * (p - w[name])) for name, p in model.named_parameters()}
        return v

    for i in range(2):
        expected, without_prox = by_hand(i, lam), by_hand(i, 0.0)
        for name in expected:
            assert torch.allclose(s2.models[1 + i][name], expected[name], atol=2e-6), name
        assert max(float((expected[k] - without_prox[k]).abs().max()) for k in expected) > 1e-3


def test_ditto_personal_start_global_restarts_each_personal_model_from_the_received_global(small):
    """personal_start=global: round r's personal update is the default's update run from v_i = w_r."""
    ctx = make_ctx(small, clients=[0, 3])
    restart, keep = Ditto(personal_epochs=1, personal_start="global"), Ditto(personal_epochs=1)
    s1 = keep.round(ctx, keep.init(ctx), 0)  # v_i != w from here on
    w = s1.models[0]
    got = restart.round(ctx, s1, 1)
    expected = keep.round(ctx, dataclasses.replace(s1, models=(w,) * len(s1.models)), 1)
    for i in range(2):
        assert_same(got.models[1 + i], expected.models[1 + i])
    assert_same(got.models[0], keep.round(ctx, s1, 1).models[0])  # the global track does not change
    assert not torch.equal(got.models[1]["fc2.weight"], keep.round(ctx, s1, 1).models[1]["fc2.weight"])
    with pytest.raises(FedcondError):
        Ditto(personal_start="fresh")


def test_ditto_total_reading_spreads_the_personal_epochs():
    alg = Ditto(personal_epochs=5, total_over_rounds=20)
    per_round = [alg.epochs_in_round(r) for r in range(20)]
    assert sum(per_round) == 5 and [r for r, e in enumerate(per_round) if e] == [3, 7, 11, 15, 19]
    assert [Ditto().epochs_in_round(r) for r in range(3)] == [5, 5, 5]


# --- IFCA --------------------------------------------------------------------------------------

def test_ifca_picks_the_lowest_loss_model(small):
    ctx = make_ctx(small)
    base = ctx.init_params(False)
    fed, cluster = small.federation, small.truth.cluster
    models = []
    for k in (1, 0):  # model 0 favours cluster 1's classes, model 1 cluster 0's
        classes = torch.unique(torch.cat([c.y_train for c, t in zip(fed.clients, cluster) if t == k]))
        bias = torch.full_like(base["fc2.bias"], -10.0)
        bias[classes] = 10.0
        models.append({**base, "fc2.bias": bias})
    choice, losses = IFCA(k=2).choose(ctx, tuple(models))
    assert choice == tuple(1 - int(t) for t in cluster)
    net = ctx.plain_model.build()
    for i, c in enumerate(fed.clients):
        by_hand = [mean_loss(net, m, c.x_train, c.y_train, None) for m in models]
        assert np.allclose(losses[i], by_hand) and choice[i] == int(np.argmin(by_hand))
    assert ari(choice, cluster) == 1.0


class CountingEngine(LoopEngine):
    def __init__(self, sgd):
        super().__init__(sgd)
        self.loss_calls = 0

    def losses(self, spec, items):
        self.loss_calls += 1
        return super().losses(spec, items)


def test_ifca_with_one_cluster_is_fedavg_bit_for_bit_and_refinement_stops(small):
    engine = CountingEngine(SGD)
    ctx = make_ctx(small, engine=engine)
    ifca, fedavg = IFCA(k=1, refine_rounds=1), FedAvg()
    a, b = ifca.init(ctx), fedavg.init(ctx)
    for r in range(2):
        a, b = ifca.round(ctx, a, r), fedavg.round(ctx, b, r)
        assert_same(a.models[0], b.models[0])
        assert a.train_loss == b.train_loss
    assert engine.loss_calls == 1  # clusters estimated in round 0 only, then frozen
    assert a.clusters == a.assignment == (0,) * 6


def test_ifca_aggregates_per_cluster_and_keeps_unpicked_models(small):
    ctx = make_ctx(small)
    alg = IFCA(k=3)
    s0 = alg.init(ctx)
    assert not torch.equal(s0.models[0]["fc2.weight"], s0.models[1]["fc2.weight"])  # distinct random inits
    s1 = alg.round(ctx, s0, 0)
    choice = s1.clusters
    trained = replay_local(ctx, [s0.models[c] for c in choice], 0)
    sizes = small.federation.sizes()
    for k in range(3):
        members = [i for i in range(6) if choice[i] == k]
        expected = weighted_average([trained[i] for i in members], sizes[members]) if members else s0.models[k]
        assert_same(s1.models[k], expected)


def test_ifca_first_assignment_random_draws_round_0_and_estimates_from_round_1(small):
    engine = CountingEngine(SGD)
    ctx = make_ctx(small, engine=engine)
    alg = IFCA(k=2, first_assignment="random")
    s0 = alg.init(ctx)
    s1 = alg.round(ctx, s0, 0)
    rng = np.random.default_rng(np.random.SeedSequence([ctx.seed, FIRST_DRAW]))
    assert s1.clusters == tuple(int(c) for c in rng.integers(0, 2, size=6))  # the seeded uniform draw
    assert engine.loss_calls == 0  # no E-step in round 0
    trained = replay_local(ctx, [s0.models[c] for c in s1.clusters], 0)
    sizes = small.federation.sizes()
    for k in range(2):
        members = [i for i in range(6) if s1.clusters[i] == k]
        expected = weighted_average([trained[i] for i in members], sizes[members]) if members else s0.models[k]
        assert_same(s1.models[k], expected)
    s2 = alg.round(ctx, s1, 1)
    assert engine.loss_calls == 1 and s2.clusters == IFCA(k=2).choose(ctx, s1.models)[0]  # by loss from round 1
    assert alg.round(ctx, s0, 0).clusters == s1.clusters  # seeded
    with pytest.raises(FedcondError, match="first_assignment must be one of loss, random, zero"):
        IFCA(first_assignment="kmeans")


def test_ifca_first_assignment_zero_trains_model_0_with_every_client_then_estimates(small):
    """Round 0 is one FedAvg round on cluster model 0 (the others keep their initialisation); the
    E-step compares that average with the untrained models from round 1."""
    engine = CountingEngine(SGD)
    ctx = make_ctx(small, engine=engine)
    alg = IFCA(k=2, first_assignment="zero")
    s0 = alg.init(ctx)
    s1 = alg.round(ctx, s0, 0)
    assert s1.clusters == (0,) * 6 and engine.loss_calls == 0
    trained = replay_local(ctx, [s0.models[0]] * 6, 0)
    assert_same(s1.models[0], weighted_average(trained, small.federation.sizes()))
    assert_same(s1.models[1], s0.models[1])  # no client: its initialisation
    s2 = alg.round(ctx, s1, 1)
    assert engine.loss_calls == 1 and s2.clusters == IFCA(k=2).choose(ctx, s1.models)[0]


def test_ifca_reports_the_last_round_its_assignment_changed(small):
    """`last_reassignment` (in every IFCA row's extra): the last round whose assignment differs from the
    round before's, so a row says whether freezing the clusters after R rounds would have run the same.
    A random first draw that the round-1 E-step changes moves it to 1; a frozen run stops it."""
    ctx = make_ctx(small)
    for alg in (IFCA(k=2, first_assignment="random"), IFCA(k=2), IFCA(k=3, refine_rounds=1)):
        state, history = alg.init(ctx), []
        for r in range(4):
            state = alg.round(ctx, state, r)
            history.append(state.clusters)
            changed = [q for q in range(1, r + 1) if history[q] != history[q - 1]]
            assert state.metrics["last_reassignment"] == max(changed, default=0)
        if alg.refine_rounds == 1:
            assert state.metrics["last_reassignment"] == 0
    drawn = IFCA(k=2, first_assignment="random")
    s1 = drawn.round(ctx, drawn.init(ctx), 0)
    s2 = drawn.round(ctx, s1, 1)
    assert s1.clusters != s2.clusters and s2.metrics["last_reassignment"] == 1  # the E-step moved the draw
    old = dataclasses.replace(s2, metrics={})  # resumed from a checkpoint written before the field: unknown
    assert IFCA.last_reassignment(old, s2.clusters, 2) is None and IFCA.last_reassignment(old, s1.clusters, 2) == 2


def test_ari_is_one_up_to_relabelling():
    assert ari([2, 2, 0, 0, 1, 1], [0, 0, 1, 1, 2, 2]) == 1.0
    assert ari([0, 1, 0, 1], [0, 0, 1, 1]) < 0.5


# --- DAC (cosine top-k) ------------------------------------------------------------------------

def test_dac_cosine_top_k_on_hand_made_vectors():
    vecs = [[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.0, 1.0, 0.0], [0.0, 0.9, 0.1], [0.0, 0.0, 1.0]]
    models = [{"w": torch.tensor(v[:2]), "b": torch.tensor(v[2:]), "buf": torch.tensor([5.0])} for v in vecs]
    sim = cosine_matrix(models, ("w", "b"), chunk=1)  # buffers excluded; chunking is exact
    v = torch.tensor(vecs, dtype=torch.float64)
    direct = F.cosine_similarity(v[:, None], v[None, :], dim=2).numpy()
    assert np.allclose(sim, direct, atol=1e-12)
    assert top_k_peers(sim, 1) == ((1,), (0,), (3,), (2,), (3,))
    # deterministic ties: client 0 is equally similar to 1 and 2, the lower index wins
    assert top_k_peers(np.array([[1, 0.5, 0.5], [0.5, 1, 0], [0.5, 0, 1]]), 1)[0] == (1,)
    assert DAC(clusters=2).peers(6) == 2 and DAC(clusters=3).peers(10) == 2 and DAC(k=1).peers(6) == 1
    assert DAC(clusters=2).peers(1) == 0


def test_dac_round_averages_uniformly_with_the_most_similar_peers(small):
    ctx = make_ctx(small)
    alg = DAC(clusters=2)
    s0 = alg.init(ctx)
    s1 = alg.round(ctx, s0, 0)
    trained = replay_local(ctx, s0.models, 0)
    names = parameter_names(ctx.plain_model)
    flat = torch.stack([torch.cat([m[k].reshape(-1) for k in names]) for m in trained]).double()  # [N, P]
    sim = F.cosine_similarity(flat[:, None], flat[None, :], dim=2)  # [N, N]
    for i in range(6):
        sim[i, i] = -2
        peers = sim[i].argsort(descending=True, stable=True)[:2].tolist()
        assert sorted(s1.extra["neighbours"][i]) == sorted(peers)
        for k in trained[i]:
            mean = torch.stack([trained[j][k].double() for j in (i, *peers)]).mean(0).float()
            assert torch.allclose(s1.models[i][k], mean, atol=1e-7)
    # on this well separated federation the parameter similarity finds the true clusters
    cluster = small.truth.cluster
    assert all(cluster[j] == cluster[i] for i, peers in enumerate(s1.extra["neighbours"]) for j in peers)


# --- DAC (the authors' loss-based version) -----------------------------------------------------

def test_dac_loss_sampling_probabilities_by_hand():
    priors = np.array([[0.0, 0.1, 0.2], [0.0, 0.0, 0.0], [0.3, 0.3, 0.0]])
    e1, e2 = np.exp(1.0), np.exp(2.0)  # tau = 10: exp(10 a)
    assert np.allclose(sampling_probabilities(priors, 0, 10.0), [0.0, e1 / (e1 + e2), e2 / (e1 + e2)])
    assert np.allclose(sampling_probabilities(priors, 1, 10.0), [0.5, 0.0, 0.5])  # nothing known: uniform over peers
    assert np.allclose(sampling_probabilities(priors, 2, 10.0), [0.5, 0.5, 0.0])
    e = np.exp([0.0, -1.0, -10.0])  # softmax(10 [2.0, 1.9, 1.0]) = exp(10 (a - max)) / sum
    assert np.allclose(softmax(10.0 * np.array([2.0, 1.9, 1.0])), e / e.sum())
    assert np.all(np.isfinite(softmax(np.array([1e4, 0.0]))))  # shifted: no overflow


def test_dac_loss_two_hop_priors_by_hand():
    priors = np.zeros((5, 5))
    priors[1] = [0.5, 0.0, 0.0, 0.7, 0.0]  # peer 1 knows 0 (that is i) and 3
    priors[2] = [0.0, 0.0, 0.0, 0.2, 0.9]  # peer 2 knows 3 and 4
    row = np.array([0.0, 2.0, 5.0, 0.0, 0.0])  # i = 0 just scored its sampled peers 1 and 2; 2 is more similar
    ever = np.array([False, True, True, False, False])
    new = two_hop_priors(priors, row, 0, (1, 2), ever)
    # 3 is known by both: take the opinion of the peer most similar to i (2); 4 only by 2; i stays 0
    assert np.allclose(new, [0.0, 2.0, 5.0, 0.2, 0.9])
    ever[3] = True  # a peer i has sampled itself keeps i's own score
    assert two_hop_priors(priors, row, 0, (1, 2), ever)[3] == 0.0


def test_dac_loss_round_scores_by_inverse_loss_and_averages_by_size(small):
    ctx = make_ctx(small)
    alg = DACLoss(n_sampled=2)
    s0 = alg.init(ctx)
    s1 = alg.round(ctx, s0, 0)
    trained = replay_local(ctx, s0.models, 0)
    net, sizes = ctx.plain_model.build(), small.federation.sizes()
    for i, sampled in enumerate(s1.extra["sampled"]):
        assert len(set(sampled)) == 2 and i not in sampled
        c = small.federation.clients[i]
        for j in sampled:
            assert np.isclose(s1.extra["priors"][i, j], 1.0 / mean_loss(net, trained[j], c.x_train, c.y_train, None))
        assert_same(s1.models[i], weighted_average([trained[j] for j in (i, *sampled)], sizes[[i, *sampled]]))
    assert s1.extra["n_sampled"].sum() == 12 and s0.extra["priors"].sum() == 0  # the old state is untouched


def test_dac_loss_softmax_aggregation_weights(small):
    ctx = make_ctx(small, clients=[0, 1, 3])
    alg = DACLoss(n_sampled=1, tau=10.0, aggregation="softmax")
    s0 = alg.init(ctx)
    s1 = alg.round(ctx, s0, 0)
    trained = replay_local(ctx, s0.models, 0)
    net = ctx.plain_model.build()
    for i, (j,) in enumerate(s1.extra["sampled"]):
        c = ctx.federation.clients[i]
        a = [1.0 / mean_loss(net, trained[m], c.x_train, c.y_train, None) for m in (i, j)]
        w = np.exp(10.0 * np.array(a)) / np.exp(10.0 * np.array(a)).sum()
        for k in trained[i]:
            expected = w[0] * trained[i][k].double() + w[1] * trained[j][k].double()
            assert torch.allclose(s1.models[i][k].double(), expected, atol=1e-6)


def test_gossip_independent_init_draws_one_init_per_client():
    data = tagged_dataset(n_train=120, n_test=40)
    sc = make_scenario("E1", "mnist", lambda n: data, k=2, clients_per_cluster=2, seed=0)
    from fedcond.protocol import Protocol
    from fedcond.simulate import make_context

    shared = Gossip(independent_init=False).init(make_context(sc, Gossip(independent_init=False), Protocol()))
    own = Gossip(independent_init=True).init(make_context(sc, Gossip(independent_init=True), Protocol()))
    assert all(torch.equal(m["fc2.weight"], shared.models[0]["fc2.weight"]) for m in shared.models)
    assert len({float(m["fc2.weight"].sum()) for m in own.models}) == 4
    assert torch.equal(own.models[0]["fc2.weight"], shared.models[0]["fc2.weight"])  # client 0 keeps stream 0
