"""Options that name readings of the paper being probed (issue 40): raw inputs (`inputs=raw`, no
standardisation), Gossip's momentum carried across rounds (`Gossip(carry_momentum=true)`) and the local
SGD dropping each epoch's partial last batch (`drop_last=true`) and Gossip's initialisation
(`Gossip(weight_init=glorot)`)."""

import pytest
import torch

from fedcond import data
from fedcond.errors import FedcondError
from fedcond.experiments import variant_name
from fedcond.protocol import Protocol
from fedcond.scenarios import make_scenario
from fedcond.simulate import make_context, run_method
from fedcond.algorithms import make_algorithm
from fedcond.engine import SGDConfig, batch_order

PROTOCOL = Protocol(epochs=2, batch_size=32)


def _with(method: str, option: str) -> str:
    """`method` with one more argument: `FedAvg` -> `FedAvg(option)`, `X(a=1)` -> `X(a=1,option)`."""
    return method.replace(")", f",{option})") if "(" in method else f"{method}({option})"


@pytest.fixture(scope="module")
def digits():
    return make_scenario("E1", "digits", lambda n: data.load("digits"), k=2, clients_per_cluster=2, seed=0)


def test_raw_inputs_drop_the_standardisation_and_name_their_cell(digits):
    fed = digits.federation
    std = make_context(digits, make_algorithm("FedAvg"), PROTOCOL, 0).plain_model
    raw = make_context(digits, make_algorithm("FedAvg"), PROTOCOL.replace(inputs="raw"), 0).plain_model
    assert (std.mean, std.std) == (fed.mean, fed.std) and fed.std != (1.0,)
    assert raw.mean == (0.0,) * len(fed.mean) and raw.std == (1.0,) * len(fed.std)
    assert variant_name("paper", {"inputs": "raw"}) == "paper[inputs=raw]"
    assert variant_name("paper", {"inputs": "standardised"}) == "paper"  # the default names no variant
    a = run_method(digits, "FedAvg", PROTOCOL)
    b = run_method(digits, "FedAvg", PROTOCOL.replace(inputs="raw"))
    assert a.per_client != b.per_client
    with pytest.raises(FedcondError, match="inputs must be one of standardised, raw"):
        PROTOCOL.replace(inputs="pixels")


def test_gossip_carries_each_clients_momentum_only_when_asked(digits):
    seen = {}

    def keep(name):
        return lambda r, state: seen.setdefault(name, []).append(state)

    run_method(digits, "Gossip", PROTOCOL, on_round=keep("reset"))
    run_method(digits, "Gossip(carry_momentum=true)", PROTOCOL, on_round=keep("carried"))
    reset, carried = seen["reset"], seen["carried"]
    assert all(m is None for m in reset[-1].momentum)
    assert all(m is not None for m in carried[0].momentum)  # each client's buffer after round 1
    for a, b in zip(reset[0].models, carried[0].models):  # round 1 starts from zero buffers either way
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], b[k]) for a, b in zip(reset[1].models, carried[1].models) for k in a)


def test_drop_last_drops_each_epochs_partial_batch_from_the_same_permutation():
    kept = batch_order(300, 64, 2, (7,))
    dropped = batch_order(300, 64, 2, (7,), drop_last=True)
    assert [len(b) for b in kept] == [64, 64, 64, 64, 44] * 2  # 5 steps an epoch at super sparse
    assert [len(b) for b in dropped] == [64] * 8  # 4: what DataLoader(drop_last=True) gives
    assert all((a == b).all() for a, b in zip(dropped, kept[:4] + kept[5:9]))
    assert [len(b) for b in batch_order(50, 64, 1, (7,), drop_last=True)] == [50]  # a small client keeps one batch
    assert [len(b) for b in batch_order(128, 64, 1, (7,), drop_last=True)] == [64, 64]  # nothing partial


def test_drop_last_is_a_named_cell_and_reaches_the_optimiser(digits):
    assert variant_name("paper", {"drop_last": True}) == "paper[drop_last=True]"
    assert variant_name("paper", {"drop_last": False}) == "paper"
    assert SGDConfig.of(PROTOCOL.replace(drop_last=True)).drop_last and not SGDConfig.of(PROTOCOL).drop_last
    a = run_method(digits, "FedAvg", PROTOCOL.replace(batch_size=40))
    b = run_method(digits, "FedAvg", PROTOCOL.replace(batch_size=40, drop_last=True))
    assert a.per_client != b.per_client


def test_the_deployable_conditional_takes_its_own_conditioning_the_pooled_one_the_protocols(digits):
    """`Conditional-FedAvg` (FiLM by default) builds a FiLM model in a cell whose protocol (and so the
    pooled Conditional beside it) keeps concat; `conditioning=None` follows the protocol."""
    from fedcond.algorithms import make_algorithm

    proto = PROTOCOL.replace(statistic="class_means")
    film = make_context(digits, make_algorithm("Conditional-FedAvg"), proto, 0)
    follows = make_context(digits, make_algorithm("Conditional-FedAvg(conditioning=None)"), proto, 0)
    pooled = make_context(digits, make_algorithm("Conditional"), proto, 0)
    assert film.spec(True).conditioning == "film" and film.spec(True).build().film is not None
    assert follows.spec(True).conditioning == pooled.spec(True).conditioning == "concat"
    film_protocol = proto.replace(conditioning="film")
    assert make_context(digits, make_algorithm("Conditional-FedAvg(conditioning=None)"), film_protocol, 0).spec(
        True
    ).conditioning == "film"
    a = run_method(digits, "Conditional-FedAvg(conditioning=film,local_epochs=1)", proto)
    assert a.per_client != run_method(digits, "Conditional-FedAvg(conditioning=concat,local_epochs=1)", proto).per_client
    with pytest.raises(FedcondError, match="conditioning must be concat or film"):
        make_algorithm("Conditional-FedAvg(conditioning=gate)")


@pytest.mark.parametrize("method", ["Conditional-FedAvg", "FedAvg", "Oracle-FedAvg"])
def test_the_fedavg_family_may_train_more_local_epochs_in_the_same_rounds(digits, method):
    """`Conditional-FedAvg(local_epochs=3)` (and FedAvg's, whose field it is): the protocol's rounds, three
    epochs a round on each client (measured by the traffic counters: three times the samples of one epoch a
    round), the same bytes sent; None follows the protocol's local epochs."""
    proto = PROTOCOL.replace(statistic="class_means")  # 2 rounds x 1 local epoch
    one = run_method(digits, f"{method}(local_epochs=1)", proto)
    three = run_method(digits, f"{method}(local_epochs=3)", proto)
    t1, t3 = one.extra["traffic"], three.extra["traffic"]
    assert t1["rounds"] == t3["rounds"] == 2
    assert t3["samples_trained_per_client"] == pytest.approx(3 * t1["samples_trained_per_client"])
    assert t3["bytes_up_per_client"] == t1["bytes_up_per_client"]  # the same communication
    assert one.per_client == run_method(digits, f"{method}(local_epochs=None)", proto).per_client
    assert one.per_client != three.per_client
    with pytest.raises(FedcondError, match="local_epochs must be >= 1"):
        make_algorithm(f"{method}(local_epochs=0)")


@pytest.mark.parametrize("method", ["Conditional-FedAvg(local_epochs=1)", "FedAvg", "Oracle-FedAvg"])
def test_the_fedavg_family_may_take_its_own_local_batch_size(digits, method):
    """`local_batch_size=8` is the run the protocol's batch size 8 gives (the same steps, bit for bit), under a
    protocol whose batch size stays 32 for every other method: more local steps for the same samples trained
    and the same bytes sent; None follows the protocol's."""
    proto = PROTOCOL.replace(statistic="class_means")  # batch 32
    own = run_method(digits, _with(method, "local_batch_size=8"), proto)
    protocols = run_method(digits, method, proto.replace(batch_size=8))
    assert own.per_client == protocols.per_client and own.train_loss == protocols.train_loss
    default = run_method(digits, method, proto)
    assert default.per_client != own.per_client
    assert own.extra["traffic"]["samples_trained_per_client"] == default.extra["traffic"]["samples_trained_per_client"]
    assert own.extra["traffic"]["bytes_up_per_client"] == default.extra["traffic"]["bytes_up_per_client"]
    with pytest.raises(FedcondError, match="local_batch_size must be >= 1"):
        make_algorithm("FedAvg(local_batch_size=0)")


@pytest.mark.parametrize("method", ["Conditional-FedAvg(local_epochs=1)", "FedAvg", "Oracle-FedAvg"])
def test_min_local_steps_shrinks_the_batch_of_small_clients_only(digits, method):
    """`min_local_steps=m`: a client with n samples trains at batch min(protocol's, max(min_batch_size, n // m)),
    so it takes at least m steps an epoch unless the floor stops it; a client with n // m >= the batch keeps the
    protocol's (its run unchanged, bit for bit); the samples trained and the bytes sent are the same."""
    proto = PROTOCOL.replace(statistic="class_means")  # batch 32
    sizes = [c.n_train for c in digits.federation.clients]
    ctx = make_context(digits, make_algorithm(method), proto, 0)
    m = min(sizes) // 20  # every client's n // m is 20 or more: above the floor 16, below the protocol's 32
    alg = make_algorithm(_with(method, f"min_local_steps={m}"))
    for i, n in enumerate(sizes):
        sgd = alg.local_sgd(ctx, i)
        assert sgd is not None and 16 <= sgd.batch_size == n // m < 32
        for drop_last in (False, True):  # the steps the engine takes (batch_order), at least m an epoch
            assert len(batch_order(n, sgd.batch_size, 1, (0, i), drop_last)) >= m
    assert make_algorithm("FedAvg(min_local_steps=1)").local_sgd(ctx, 0) is None  # n // 1 >= 32: unchanged
    floor = make_algorithm("FedAvg(min_local_steps=100000)").local_sgd(ctx, 0)
    assert floor is not None and floor.batch_size == 16  # never below min_batch_size
    tiny = make_algorithm("FedAvg(min_local_steps=100000,min_batch_size=1)").local_sgd(ctx, 0)
    assert tiny is not None and tiny.batch_size == 1
    assert make_algorithm("FedAvg(min_local_steps=100000,min_batch_size=64)").local_sgd(ctx, 0) is None  # no larger
    default = run_method(digits, _with(method, "min_local_steps=None"), proto)  # the protocol's batch for every client
    assert run_method(digits, _with(method, "min_local_steps=1"), proto).per_client == default.per_client
    # a step count that gives every client the same batch b (their sizes are close) is local_batch_size=b
    common = next(k for k in range(2, max(sizes)) if len({n // k for n in sizes}) == 1 and sizes[0] // k < 32)
    b = sizes[0] // common
    small = run_method(digits, _with(method, f"min_local_steps={common}"), proto)
    same = run_method(digits, _with(method, f"local_batch_size={b},min_local_steps=None"), proto)
    assert small.per_client == same.per_client
    assert small.per_client != default.per_client
    t, t0 = small.extra["traffic"], default.extra["traffic"]
    assert t["samples_trained_per_client"] == t0["samples_trained_per_client"]
    assert t["bytes_up_per_client"] == t0["bytes_up_per_client"]
    with pytest.raises(FedcondError, match="min_local_steps must be >= 1"):
        make_algorithm("FedAvg(min_local_steps=0)")
    with pytest.raises(FedcondError, match="min_batch_size must be >= 1"):
        make_algorithm("FedAvg(min_batch_size=0)")


def test_gossip_glorot_init_draws_kerass_defaults_independently_per_client():
    import math

    sc = make_scenario("E1", "digits", lambda n: data.load("digits"), k=2, clients_per_cluster=2, seed=0)
    alg = make_algorithm("Gossip(weight_init=glorot)")
    ctx = make_context(sc, alg, PROTOCOL, 0)
    torch_default = make_algorithm("Gossip").init(ctx).models
    models = alg.init(ctx).models
    first = models[0]
    layers = [k for k, t in first.items() if t.is_floating_point() and t.dim() >= 2]
    assert layers  # conv and linear weights
    for k in layers:
        t = first[k].double()
        area = math.prod(t.shape[2:])
        bound = math.sqrt(6.0 / (t.shape[1] * area + t.shape[0] * area))
        assert t.abs().max() <= bound and t.abs().max() > 0.95 * bound  # U(-bound, bound), the bound reached
        if t.numel() > 1000:
            assert abs(float(t.std()) - bound / math.sqrt(3)) < 0.05 * bound / math.sqrt(3)  # a uniform's spread
        bias = k[: -len("weight")] + "bias"
        if bias in first:
            assert not first[bias].any() and torch_default[0][bias].any()  # Keras: zero biases; torch's are not
    assert not torch.equal(models[0][layers[0]], models[1][layers[0]])  # one draw per client
    again = alg.init(ctx).models
    assert all(torch.equal(a[k], b[k]) for a, b in zip(models, again) for k in a)  # seeded
    shared = make_algorithm("Gossip(weight_init=glorot,independent_init=false)").init(ctx).models
    assert all(torch.equal(m[layers[0]], shared[0][layers[0]]) for m in shared)
    with pytest.raises(FedcondError, match="Gossip weight_init must be torch or glorot"):
        make_algorithm("Gossip(weight_init=he)")


def test_ifca_glorot_init_draws_each_cluster_model_as_gossip_draws_that_client(digits):
    """IFCA(weight_init=glorot): cluster model k is drawn from the stream Gossip uses for client k (one
    module, `algorithms/weight_init.py`); torch, the default, leaves the layer defaults untouched."""
    alg = make_algorithm("IFCA(k=2,weight_init=glorot)")
    ctx = make_context(digits, alg, PROTOCOL, 0)
    models = alg.init(ctx).models
    gossip = make_algorithm("Gossip(weight_init=glorot)").init(ctx).models
    assert all(torch.equal(models[k][name], gossip[k][name]) for k in range(2) for name in models[k])
    plain = make_algorithm("IFCA(k=2)").init(ctx).models
    assert all(torch.equal(plain[k][name], ctx.init_params(False, k)[name]) for k in range(2) for name in plain[k])
    assert any(not torch.equal(models[0][name], plain[0][name]) for name in models[0])
    with pytest.raises(FedcondError, match="IFCA's weight_init must be torch or glorot"):
        make_algorithm("IFCA(weight_init=he)")
