"""Shared pieces of the Flower tests: a small real-MNIST federation and a grid that records every
message the server receives."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr")

from fedcond_testing import SHARED, shared_file  # noqa: E402

EXPERIMENT = "E1/mnist/K=2/rich"
FRACTION = 0.05  # 10 clients of ~300 training images each


@pytest.fixture(scope="session")
def fl_spec():
    shared_file("mnist.npz.xz")
    from fedcond.experiments import EXPERIMENTS

    return EXPERIMENTS[EXPERIMENT].spec(seed=0, data_dir=str(SHARED), fraction=FRACTION)


@pytest.fixture(scope="session")
def fl_scenario(fl_spec):
    return fl_spec.build()


@pytest.fixture(scope="session")
def flower_session(fl_spec, fl_scenario, tmp_path_factory):
    """Every Flower run the tests look at, served in one simulation: name -> (result, received messages)."""
    from flower_testing import run_session, session_runs

    ckpt = tmp_path_factory.mktemp("flower") / "server.pt"
    return run_session(session_runs(fl_spec, fl_scenario.federation.num_clients, str(ckpt)))
