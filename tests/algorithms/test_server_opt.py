"""Server-side optimisers of the FedAvg family (server_opt.py): FedAvgM and FedAdam by their
equations, plain FedAvg untouched, the optimiser's state carried through a checkpoint."""

import pytest
import torch

from fedcond import data
from fedcond.algorithms import make_algorithm
from fedcond.algorithms.server_opt import ServerOptimiser
from fedcond.checkpoint import Checkpoint
from fedcond.errors import FedcondError
from fedcond.protocol import Protocol
from fedcond.scenarios import make_scenario
from fedcond.simulate import run_method

PROTOCOL = Protocol(epochs=3, batch_size=32)


@pytest.fixture(scope="module")
def digits():
    return make_scenario("E1", "digits", lambda n: data.load("digits"), k=2, clients_per_cluster=2, seed=0)


def _params(w, rm):
    return {"conv.weight": torch.tensor(w), "bn.running_mean": torch.tensor(rm), "bn.num_batches_tracked": torch.tensor(3)}


def test_momentum_by_its_equation_over_two_rounds():
    opt = ServerOptimiser(server_opt="momentum", server_lr=0.5, server_momentum=0.9)
    w0, avg0 = _params([1.0, 2.0], [0.0]), _params([1.5, 1.0], [0.4])
    w1, slots = opt.server_step(w0, avg0, None)
    m0 = torch.tensor([0.5, -1.0])  # Delta_0
    torch.testing.assert_close(w1["conv.weight"], torch.tensor([1.0, 2.0]) + 0.5 * m0)
    assert torch.equal(w1["bn.running_mean"], avg0["bn.running_mean"])  # averaged, not stepped
    assert torch.equal(w1["bn.num_batches_tracked"], avg0["bn.num_batches_tracked"])
    avg1 = _params([1.0, 1.0], [0.2])
    w2, _ = opt.server_step(w1, avg1, slots)
    m1 = 0.9 * m0 + (avg1["conv.weight"] - w1["conv.weight"])
    torch.testing.assert_close(w2["conv.weight"], w1["conv.weight"] + 0.5 * m1)


def test_adam_by_its_equation_without_bias_correction():
    opt = ServerOptimiser(server_opt="adam", server_lr=0.1, server_momentum=0.9, server_beta2=0.99, server_tau=1e-3)
    w0, avg0 = _params([1.0, 2.0], [0.0]), _params([1.5, 1.0], [0.4])
    w1, slots = opt.server_step(w0, avg0, None)
    d = torch.tensor([0.5, -1.0])
    m, v = 0.1 * d, 0.01 * d * d
    torch.testing.assert_close(w1["conv.weight"], w0["conv.weight"] + 0.1 * m / (v.sqrt() + 1e-3))
    torch.testing.assert_close(slots["m"]["conv.weight"], m)
    torch.testing.assert_close(slots["v"]["conv.weight"], v)
    assert "bn.running_mean" not in slots["m"]


def test_the_default_is_fedavg_bit_for_bit(digits):
    plain = run_method(digits, "FedAvg", PROTOCOL, seed=0)
    named = run_method(digits, "FedAvg(server_opt=avg,server_lr=1)", PROTOCOL, seed=0)
    assert plain.per_client == named.per_client and plain.train_loss == named.train_loss


@pytest.mark.parametrize("method", ["Conditional-FedAvg(server_opt=adam)", "FedProx(server_opt=momentum)"])
def test_a_resumed_run_carries_the_servers_state(digits, tmp_path, method):
    class Stop(Exception):
        pass

    def stop_after_2(r, state):
        if r + 1 == 2:
            assert "server" in state.extra  # the optimiser's state is part of what a checkpoint keeps
            raise Stop

    whole = run_method(digits, method, PROTOCOL, seed=0)
    with pytest.raises(Stop):
        run_method(digits, method, PROTOCOL, seed=0, checkpoint=Checkpoint(tmp_path, {"m": method}, every_seconds=0),
                   on_round=stop_after_2)
    resumed = run_method(digits, method, PROTOCOL, seed=0, checkpoint=Checkpoint(tmp_path, {"m": method}))
    assert resumed.extra["resumed_after_round"] == 2
    assert resumed.per_client == whole.per_client and resumed.train_loss == whole.train_loss
    assert whole.per_client != run_method(digits, method.split("(")[0], PROTOCOL, seed=0).per_client  # it did something


@pytest.mark.parametrize("text, needle", [("FedAvg(server_opt=yogi)", "server_opt must be one of"),
                                          ("FedAvg(server_lr=0)", "server_lr must be > 0"),
                                          ("FedProx(server_momentum=1)", "server_momentum and server_beta2")])
def test_bad_settings_are_one_line(text, needle):
    with pytest.raises(FedcondError, match=needle):
        make_algorithm(text)


@pytest.mark.parametrize("kind", ["avg", "momentum", "adam"])
def test_unread_fields_are_the_ones_the_step_ignores(kind):
    """ServerOptimiser.unread(kind) (what names a row by what it ran leaves out): changing such a field leaves two
    rounds of the step as they were; changing any field the kind reads moves them."""
    other = {"server_lr": 0.3, "server_momentum": 0.7, "server_beta2": 0.5, "server_tau": 0.1}
    base = ServerOptimiser(server_opt=kind, server_lr=0.9)

    def two_rounds(opt):
        w, slots = _params([1.0, 2.0], [0.0]), None
        for avg in (_params([1.5, 1.0], [0.4]), _params([0.5, 3.0], [0.1])):
            w, slots = opt.server_step(w, avg, slots)
        return w["conv.weight"]

    ref = two_rounds(base)
    for field, value in other.items():
        moved = not torch.equal(two_rounds(ServerOptimiser(**{**base.__dict__, field: value})), ref)
        assert moved == (field not in ServerOptimiser.unread(kind)), (kind, field)
    assert "server_opt" not in ServerOptimiser.unread(kind)
