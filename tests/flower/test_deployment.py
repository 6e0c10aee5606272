"""A real deployment: a SuperLink and one SuperNode per client as separate processes on loopback,
over TLS with authenticated SuperNodes (LocalDeployment's default), and nodes it must refuse.

Every ClientApp message runs in a fresh `flwr-clientapp` process (Flower's subprocess isolation),
so the run uses two clients for two rounds (~3 min on a busy two-core machine). The refused nodes are tried
against the same SuperLink, before the run test stops it (tests run in file order).
"""

import os
import signal
import subprocess

import pytest

from fedcond.protocol import PAPER
from fedcond.run import ScenarioSpec
from fedcond.simulate import run_method

from fedcond_testing import SHARED, shared_file

pytestmark = [pytest.mark.flower, pytest.mark.slow]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    pytest.importorskip("flwr")
    from fedcond.flower.deploy import LocalDeployment

    with LocalDeployment(clients=2, workdir=tmp_path_factory.mktemp("deploy"), data_dir=str(SHARED)) as deployment:
        yield deployment


def outside_supernode(deployment, name: str, *flags: str, timeout: float = 90.0) -> tuple[int | None, str]:
    """Start a SuperNode that is not one of the federation's; (exit code or None if still running
    after `timeout`, its log). Flower gives up after one retry; whatever is left is killed."""
    from fedcond.flower.deploy import _bin, free_port

    log = deployment.workdir / f"outside-{name}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([_bin("flower-supernode"), "--superlink", deployment.address, "--port", str(free_port()),
                                 "--max-retries", "1", "--max-wait-time", "10", "--node-config", "partition-id=0", *flags],
                                stdout=out, stderr=subprocess.STDOUT, env=deployment.env, start_new_session=True)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = None
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its SuperExec child, if it outlived it
    except ProcessLookupError:
        pass
    return code, log.read_text()


def test_a_node_whose_key_is_not_registered_is_refused(deployment, tmp_path):
    from fedcond.flower.keys import make_federation_keys

    stranger = make_federation_keys(tmp_path / "stranger", 1)
    ca = ("--root-certificates", str(deployment.keys.ca))
    code, log = outside_supernode(deployment, "self-registering", *ca)  # no key: asks to register itself
    assert code not in (0, None) and "All SuperNodes must be registered via the CLI" in log
    code, log = outside_supernode(deployment, "unregistered", *ca, "--auth-supernode-private-key", str(stranger.auth_key(0)))
    assert code not in (0, None) and "Failed to activate SuperNode" in log
    assert deployment.procs[0].poll() is None  # the SuperLink is unmoved


def test_a_node_that_cannot_verify_the_superlinks_certificate_is_refused(deployment, tmp_path):
    """A node that trusts another CA (or a SuperLink certificate that our CA did not sign) never
    gets past the TLS handshake, even with a registered key; nor does a node without TLS."""
    from fedcond.flower.keys import make_federation_keys

    other = make_federation_keys(tmp_path / "other", 1)
    key = ("--auth-supernode-private-key", str(deployment.keys.auth_key(0)))
    code, log = outside_supernode(deployment, "other-ca", "--root-certificates", str(other.ca), *key)
    assert code not in (0, None) and "CERTIFICATE_VERIFY_FAILED" in log
    code, log = outside_supernode(deployment, "plain-http", "--insecure")  # (Flower refuses a key without TLS itself)
    assert code not in (0, None) and "Failed to initialize the connection to the SuperLink" in log


def test_superlink_and_supernodes_run_rounds_over_tls_and_stop_cleanly(deployment, tmp_path):
    from fedcond.flower.config import FlowerRun

    shared_file("mnist.npz.xz")
    assert len(deployment.procs) == 3  # one SuperLink, two SuperNodes
    assert "--enable-supernode-auth" in deployment.superlink_args() and "--insecure" not in deployment.supernode_args(0)
    spec = ScenarioSpec(family="E1", dataset="mnist", k=2, clients_per_cluster=1, seed=0, data_dir=str(SHARED), fraction=0.05)
    protocol = PAPER.replace(epochs=2)
    # Conditional's secure z-score: the nodes check every relayed key against the roster (the run fails otherwise)
    run = FlowerRun(spec=spec, method="Conditional-FedAvg", clients=2, protocol=protocol)
    [result] = deployment.submit(run, tmp_path / "result.json", timeout=400)
    stopped = deployment.stop()
    assert "error" not in result, result.get("error")
    assert [h["round"] for h in result["history"]] == [1, 2]
    ref = run_method(spec.build(), "Conditional-FedAvg", protocol, seed=0)
    assert result["per_client"] == ref.per_client  # the same numbers as in one process
    assert stopped["killed"] == 0 and stopped["groups_left"] == 0
    assert all(code in (0, -signal.SIGTERM) for code in stopped["codes"])
    print(f"\nSuperLink + 2 SuperNodes over TLS: 2 rounds of Conditional-FedAvg, accuracy {result['accuracy']:.4f} "
          f"(simulator {ref.accuracy:.4f}); stopped with exit codes {stopped['codes']}")
