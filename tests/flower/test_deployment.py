"""A real deployment: a SuperLink and one SuperNode per client as separate processes on loopback.

Every ClientApp message runs in a fresh `flwr-clientapp` process (Flower's subprocess isolation),
so this test uses two clients and FedAvg for two rounds (~1 min on two cores).
"""

import signal

import pytest

from fedcond.protocol import PAPER
from fedcond.run import ScenarioSpec
from fedcond.simulate import run_method

from fedcond_testing import SHARED, shared_file

pytestmark = [pytest.mark.flower, pytest.mark.slow]


def test_superlink_and_supernodes_run_rounds_and_stop_cleanly(tmp_path):
    pytest.importorskip("flwr")
    shared_file("mnist.npz.xz")
    from fedcond.flower.config import FlowerRun
    from fedcond.flower.deploy import LocalDeployment

    spec = ScenarioSpec(family="E1", dataset="mnist", k=2, clients_per_cluster=1, seed=0, data_dir=str(SHARED), fraction=0.05)
    protocol = PAPER.replace(epochs=2)
    run = FlowerRun(spec=spec, method="FedAvg", clients=2, protocol=protocol)
    with LocalDeployment(clients=2, workdir=tmp_path / "deploy") as deployment:
        assert len(deployment.procs) == 3  # one SuperLink, two SuperNodes
        [result] = deployment.submit(run, tmp_path / "result.json", timeout=400)
        stopped = deployment.stop()
    assert "error" not in result, result.get("error")
    assert [h["round"] for h in result["history"]] == [1, 2]
    ref = run_method(spec.build(), "FedAvg", protocol, seed=0)
    assert result["per_client"] == ref.per_client  # the same numbers as in one process
    assert stopped["killed"] == 0 and stopped["groups_left"] == 0
    assert all(code in (0, -signal.SIGTERM) for code in stopped["codes"])
    print(f"\nSuperLink + 2 SuperNodes: 2 rounds of FedAvg, accuracy {result['accuracy']:.4f} "
          f"(simulator {ref.accuracy:.4f}); stopped with exit codes {stopped['codes']}")
