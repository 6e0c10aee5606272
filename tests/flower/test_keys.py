"""`fedcond flower keys`: a test federation's TLS certificates, SuperNode authentication keys and the
secure sum's roster, in the formats Flower 1.42 and the secure sum read; and LocalDeployment's use of them."""

import json

import pytest

from fedcond.cli import main
from fedcond.errors import FedcondError


def exit_code(argv) -> int:
    """main's return value, or the code argparse exits with on a malformed option."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def test_keys_make_a_chain_flower_accepts_and_a_roster_the_secure_sum_checks(tmp_path, capsys):
    pytest.importorskip("flwr")
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key, load_ssh_public_key
    from flwr.cli.supernode.register import try_load_public_key

    from fedcond.flower import secure_sum
    from fedcond.flower.keys import FederationKeys

    assert main(["flower", "keys", "--out", str(tmp_path / "fed"), "--nodes", "3", "--host", "link.example"]) == 0
    keys = FederationKeys(tmp_path / "fed")
    ca = x509.load_pem_x509_certificate(keys.ca.read_bytes())
    cert = x509.load_pem_x509_certificate(keys.superlink_cert.read_bytes())
    cert.verify_directly_issued_by(ca)  # raises unless our CA signed the SuperLink's certificate
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost", "link.example"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert not (tmp_path / "fed" / "ca.key").exists()  # nothing more can be signed with this CA
    roster = {int(k): bytes.fromhex(v) for k, v in json.loads(keys.roster.read_text()).items()}
    publics = {i: secure_sum.new_keypair()[1] for i in range(3)}
    signatures = {}
    for i in range(3):
        auth = load_ssh_private_key(keys.auth_key(i).read_bytes(), None)  # as flower-supernode reads it
        assert isinstance(auth, ec.EllipticCurvePrivateKey) and auth.curve.name == "secp384r1"
        assert load_ssh_public_key(keys.auth_pub(i).read_bytes()).public_numbers() == auth.public_key().public_numbers()
        assert try_load_public_key(keys.auth_pub(i))  # as `flwr supernode register` reads it
        signatures[i] = secure_sum.sign_key(bytes.fromhex(keys.identity(i).read_text()), i, publics[i])
        for private in (keys.auth_key(i), keys.identity(i)):
            assert private.stat().st_mode & 0o077 == 0  # private keys: owner only
    secure_sum.check_peers(0, publics[0], publics, 2, signatures, roster)  # each identity matches its roster entry
    signatures[1] = signatures[2]
    with pytest.raises(FedcondError, match="not signed by its identity in the roster"):
        secure_sum.check_peers(0, publics[0], publics, 2, signatures, roster)


@pytest.mark.parametrize("argv, message", [
    (["--nodes", "0"], "--nodes: expected a whole number in [1, 10000], got 0"),
    (["--nodes", "10001"], "--nodes: expected a whole number in [1, 10000], got 10001"),
    (["--nodes", "2", "--host", "not a host"], "--host takes a host name or an IP address"),
    (["--nodes", "2", "--out", ""], "--out: expected a value, got an empty one"),
    (["--nodes", "2", "--out", "{existing}"], "already exists and is not an empty folder; keys are never overwritten"),
])
def test_bad_input_is_one_line(tmp_path, capsys, argv, message):
    pytest.importorskip("flwr")
    (tmp_path / "existing").mkdir()
    (tmp_path / "existing" / "ca.crt").write_text("someone's CA")
    argv = [a.format(existing=tmp_path / "existing") for a in argv]
    out = [] if "--out" in argv else ["--out", str(tmp_path / "new")]
    assert exit_code(["flower", "keys", *out, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "existing" / "ca.crt").read_text() == "someone's CA"


def test_a_local_deployment_is_tls_with_authenticated_nodes_unless_told_insecure(tmp_path):
    pytest.importorskip("flwr")
    from fedcond.flower.deploy import LocalDeployment
    from fedcond.flower.keys import make_federation_keys

    keys = make_federation_keys(tmp_path / "keys", 2)
    secure = LocalDeployment(clients=2, workdir=tmp_path / "a", keys=keys.folder)
    secure.keys = secure._load_keys()
    link, node = secure.superlink_args(), secure.supernode_args(1)
    assert "--insecure" not in link + node and "--enable-supernode-auth" in link
    assert link[link.index("--ssl-certfile") + 1] == str(keys.superlink_cert)
    assert node[node.index("--root-certificates") + 1] == str(keys.ca)
    assert node[node.index("--auth-supernode-private-key") + 1] == str(keys.auth_key(1))
    assert f'secagg-roster="{keys.roster}" secagg-identity="{keys.identity(1)}"' in node[-1]
    quick = LocalDeployment(clients=2, workdir=tmp_path / "b", insecure=True)
    assert "--insecure" in quick.superlink_args() and "--insecure" in quick.supernode_args(0)
    assert "secagg-roster" not in quick.supernode_args(0)[-1]
    with pytest.raises(FedcondError, match="give keys or insecure=True, not both"):
        LocalDeployment(clients=2, workdir=tmp_path / "c", keys=keys.folder, insecure=True)
    with pytest.raises(FedcondError, match="holds keys for 2 SuperNodes, not one per each of the 3 clients"):
        LocalDeployment(clients=3, workdir=tmp_path / "d", keys=keys.folder)._load_keys()
