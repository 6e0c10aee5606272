"""What a run costs each client (algorithms/traffic.py): bytes each way and samples computed on,
checked against what each algorithm's protocol sends, from the model's own size; a resumed run
counts as an uninterrupted one."""

import pytest
import torch

from fedcond import data
from fedcond.algorithms.traffic import Traffic, payload_bytes
from fedcond.checkpoint import Checkpoint
from fedcond.algorithms.fedrep import head_names
from fedcond.protocol import Protocol
from fedcond.scenarios import make_scenario
from fedcond.simulate import make_context, run_method

PROTOCOL = Protocol(epochs=2, batch_size=32)  # 2 rounds of 1 local epoch


@pytest.fixture(scope="module")
def digits():
    return make_scenario("E1", "digits", lambda n: data.load("digits"), k=2, clients_per_cluster=2, seed=0)


def _model_bytes(scenario, method) -> int:
    from fedcond.algorithms import make_algorithm

    ctx = make_context(scenario, make_algorithm(method), PROTOCOL, 0)
    return payload_bytes(ctx.spec(False).build().state_dict())


def _sizes(scenario):
    return torch.tensor([c.n_train for c in scenario.federation.clients], dtype=torch.float64)


def test_payload_bytes_counts_tensors_at_their_dtype():
    assert payload_bytes({"a": torch.zeros(3), "b": [torch.zeros(2, dtype=torch.int64), None]}) == 12 + 16
    with pytest.raises(TypeError):
        payload_bytes("weights")


def test_fedavg_sends_and_receives_the_model_every_round_and_trains_its_data(digits):
    t = run_method(digits, "FedAvg", PROTOCOL).extra["traffic"]
    model = _model_bytes(digits, "FedAvg")
    assert t["rounds"] == 2
    assert t["bytes_down_per_client"] == t["bytes_up_per_client"] == 2 * model
    assert t["samples_trained_per_client"] == pytest.approx(2 * float(_sizes(digits).mean()))


def test_ditto_keeps_its_personal_model_at_home_and_computes_twice(digits):
    t = run_method(digits, "Ditto(personal_epochs=3)", PROTOCOL).extra["traffic"]
    assert t["bytes_down_per_client"] == t["bytes_up_per_client"] == 2 * _model_bytes(digits, "Ditto")
    # per round: the global model's epoch and 3 personal ones
    assert t["samples_trained_per_client"] == pytest.approx(2 * (1 + 3) * float(_sizes(digits).mean()))


def test_fedrep_sends_the_body_only(digits):
    t = run_method(digits, "FedRep(head_epochs=1)", PROTOCOL).extra["traffic"]
    model = make_context(digits, __import__("fedcond").algorithms.make_algorithm("FedRep"), PROTOCOL, 0).spec(False)
    state = model.build().state_dict()
    body = payload_bytes({k: v for k, v in state.items() if k not in head_names(model)})
    assert 0 < body < payload_bytes(state)
    assert t["bytes_down_per_client"] == t["bytes_up_per_client"] == 2 * body
    assert t["samples_trained_per_client"] == pytest.approx(2 * 2 * float(_sizes(digits).mean()))  # head + body


def test_ifca_broadcasts_every_cluster_model_and_evaluates_each(digits):
    t = run_method(digits, "IFCA", PROTOCOL).extra["traffic"]
    model = _model_bytes(digits, "IFCA")
    assert t["bytes_down_per_client"] == 2 * 2 * model  # K = 2 models, 2 rounds
    assert t["bytes_up_per_client"] == 2 * model
    assert t["samples_forward_per_client"] == pytest.approx(2 * 2 * float(_sizes(digits).mean()))


def test_pooled_training_needs_the_data_on_the_server_once(digits):
    fed = digits.federation
    t = run_method(digits, "Oracle", PROTOCOL).extra["traffic"]
    data_bytes = [payload_bytes((c.x_train, c.y_train)) for c in fed.clients]
    assert t["bytes_up_per_client"] == pytest.approx(sum(data_bytes) / len(data_bytes))
    assert t["bytes_down_per_client"] == 0 and t["samples_trained_per_client"] == 0  # the server trains
    local = run_method(digits, "Local", PROTOCOL).extra["traffic"]
    assert local["bytes_up_per_client"] == local["bytes_down_per_client"] == 0
    assert local["samples_trained_per_client"] == pytest.approx(2 * float(_sizes(digits).mean()))


def test_conditional_fedavg_adds_the_secure_sum_of_its_statistic(digits):
    plain = run_method(digits, "FedAvg", PROTOCOL).extra["traffic"]
    cond = run_method(digits, "Conditional-FedAvg", PROTOCOL).extra["traffic"]
    stat = make_context(digits, __import__("fedcond").algorithms.make_algorithm("Conditional-FedAvg"), PROTOCOL, 0)
    extra_in = cond["bytes_up_per_client"] - plain["bytes_up_per_client"]
    assert extra_in > 2 * 4 * 5  # the conditioned head's extra inputs, twice, plus the statistic itself
    assert cond["bytes_down_per_client"] > plain["bytes_down_per_client"]
    assert stat.conditioned_model is not None


def test_pfedhn_sends_generated_weights_and_gets_their_change(digits):
    t = run_method(digits, "pFedHN(hidden=16,n_hidden=1)", PROTOCOL).extra["traffic"]
    assert t["bytes_down_per_client"] == t["bytes_up_per_client"] > 0
    assert t["bytes_down_per_client"] <= 2 * _model_bytes(digits, "FedAvg")  # the batch-norm statistics stay


def test_methods_that_do_not_count_say_nothing_rather_than_zero(digits):
    assert "traffic" not in run_method(digits, "SCAFFOLD", PROTOCOL).extra


def test_a_resumed_run_counts_like_an_uninterrupted_one(digits, tmp_path):
    class Stop(Exception):
        pass

    def stop_after_1(r, state):
        if r == 0:
            raise Stop

    protocol = Protocol(epochs=3, batch_size=32)
    whole = run_method(digits, "FedAvg", protocol).extra["traffic"]
    with pytest.raises(Stop):
        run_method(digits, "FedAvg", protocol, checkpoint=Checkpoint(tmp_path, {"m": 1}, every_seconds=0),
                   on_round=stop_after_1)
    resumed = run_method(digits, "FedAvg", protocol, checkpoint=Checkpoint(tmp_path, {"m": 1}))
    assert resumed.extra["resumed_after_round"] == 1 and resumed.extra["traffic"] == whole


def test_restore_of_nothing_starts_from_zero():
    t = Traffic(3)
    t.restore(None)
    assert t.down.tolist() == [0, 0, 0]


def test_pefll_also_exchanges_its_embedding_network_and_descriptor(digits):
    hn = run_method(digits, "pFedHN(hidden=16,n_hidden=1)", PROTOCOL).extra["traffic"]
    pe = run_method(digits, "PeFLL(hidden=16,n_hidden=1)", PROTOCOL).extra["traffic"]
    assert pe["bytes_down_per_client"] == pe["bytes_up_per_client"] > hn["bytes_down_per_client"]
    assert pe["samples_trained_per_client"] == pytest.approx(2 * 2 * float(_sizes(digits).mean()))  # + its data
