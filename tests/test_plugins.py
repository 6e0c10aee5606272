"""The extension API (fedcond.plugins, docs/extending.md): names registered by code, by --plugin
(in the parent and in every worker process) and by an installed distribution's entry point work
wherever the built-ins do; bad plug-ins are one line and exit 2."""

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

import fedcond
from fedcond import plugin_loading
from fedcond.algorithms import ALGORITHMS, make_algorithm, resolve_methods
from fedcond.cli import main
from fedcond.data import registry as data_registry
from fedcond.errors import FedcondError
from fedcond.models import ModelSpec
from fedcond.models.registry import MODELS
from fedcond.protocol import Protocol
from fedcond.scenarios import ScenarioSpec
from fedcond.stats import STATISTICS
from fedcond_testing import SHARED, shared_file

REPO = Path(__file__).resolve().parents[1]
SRC = Path(fedcond.__file__).resolve().parents[1]
TOY_PKG = REPO / "examples" / "toy_plugin_pkg"
EXAMPLE = "examples.plugins.fedavgm"


@pytest.fixture
def registries(monkeypatch):
    """Every registry and the plug-in bookkeeping as they were, after the test."""
    from fedcond.experiments import EXPERIMENTS
    from fedcond.scenarios import families

    saved = [
        (r, dict(r))
        for r in (ALGORITHMS, data_registry.DATASETS, data_registry.OPTIONS, MODELS, STATISTICS, EXPERIMENTS,
                  families.FAMILIES, families.USER_PARTITIONS)
    ]
    lists = [(lst, list(lst)) for lst in (families.STANDARD, families.CLUSTERLESS)]
    monkeypatch.setattr(plugin_loading, "_imported", [])
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for registry, before in saved:  # in place: every importer holds these objects
        registry.clear()
        registry.update(before)
    for lst, items in lists:
        lst[:] = items
    for name in [m for m in sys.modules if m.split(".")[0] in ("examples", "fedcond_toy_plugin", "bad_plugin")]:
        del sys.modules[name]  # a later import registers again


def _toy():
    """The toy package's module, imported from its source folder (not installed)."""
    sys.path.insert(0, str(TOY_PKG / "src"))
    import fedcond_toy_plugin

    return fedcond_toy_plugin


def _env(*paths) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *map(str, paths), env.get("PYTHONPATH", "")])
    env.pop(plugin_loading.DISABLE_ENV, None)
    return env


def _fedcond(*args, cwd=REPO, paths=(), timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "fedcond.cli", *args], cwd=cwd, env=_env(*paths), capture_output=True, text=True,
        timeout=timeout,
    )


# ---- (i) registering by code ------------------------------------------------------------------
def test_an_algorithm_registered_by_code_is_a_method_like_the_built_ins(registries):
    fedcond.load_plugins(EXAMPLE)
    assert "FedAvgM" in ALGORITHMS and "FedAvgM" in resolve_methods("registry")
    assert resolve_methods("fedavgm(beta=0.5),FedAvg") == ["FedAvgM(beta=0.5)", "FedAvg"]
    alg = make_algorithm("FedAvgM(beta=0.5,server_lr=2)")
    assert (alg.beta, alg.server_lr) == (0.5, 2.0)
    assert plugin_loading.loaded_modules() == (EXAMPLE,)
    fedcond.load_plugins(EXAMPLE)  # the same module again: nothing changes
    assert plugin_loading.loaded_modules() == (EXAMPLE,)


def test_registration_refuses_duplicates_and_wrong_objects_in_one_line(registries):
    from fedcond.algorithms import Algorithm, FedAvg
    from fedcond.plugins import register_algorithm, register_dataset, register_model, register_statistic

    @dataclasses.dataclass(frozen=True)
    class Mine(FedAvg):
        pass

    class Plain(Algorithm):
        conditioned, needs_truth, federated = False, False, True

    register_algorithm("Mine", Mine)
    register_algorithm("Mine", Mine)  # the same class again (a module imported twice) is no change
    cases = [
        (lambda: register_algorithm("fedavg", Mine), "algorithm 'fedavg' is already registered (as 'FedAvg')"),
        (lambda: register_algorithm("mine", FedAvg), "already registered (as 'Mine')"),
        (lambda: register_algorithm("A+B", Mine), "use letters, digits"),
        (lambda: register_algorithm("all", Mine), "--methods keyword"),
        (lambda: register_algorithm("Obj", object), "subclass of fedcond.algorithms.Algorithm"),
        (lambda: register_algorithm("Plain", Plain), "Plain must be a dataclass"),
        (lambda: register_dataset("MNIST", lambda d: None), "dataset 'MNIST' is already registered (as 'mnist')"),
        (lambda: register_dataset("fashion-mnist", lambda d: None), "already registered (as 'fmnist')"),
        (lambda: register_dataset("new", 3), "the loader must be callable"),
        (lambda: register_model("Mnist_CNN", lambda s, k: nn.Linear(1, k)), "already registered (as 'mnist_cnn')"),
        (
            lambda: register_statistic("Random", dataclasses.replace(STATISTICS["random"], compute=print)),
            "statistic 'Random' is already registered (as 'random')",
        ),
        (lambda: register_statistic("mine", lambda: 0), "expected a fedcond.stats.Statistic"),
        (lambda: register_statistic("mine"), "give description= and dim="),
    ]
    for call, message in cases:
        with pytest.raises(FedcondError) as e:
            call()
        assert message in str(e.value) and "\n" not in str(e.value), (message, str(e.value))


def test_a_dataset_registered_by_code_builds_scenarios_and_bad_loaders_are_refused(registries):
    toy = _toy()
    fedcond.register_dataset("toy_blobs", toy.load_blobs)
    assert data_registry.normalize_name("Toy-Blobs") == "toy_blobs"
    scenario = ScenarioSpec(family="E1", dataset="toy_blobs", k=2, clients_per_cluster=2).build()
    fed = scenario.federation
    assert fed.input_shape == (1, 8, 8) and fed.num_clients == 4 and fed.dataset == "toy_blobs"
    labels = [set(c.y_train.tolist()) for c in fed.clients]  # E1: each cluster its own block of labels
    assert labels[0] | labels[1] == set(range(5)) and labels[2] | labels[3] == set(range(5, 10))
    fedcond.register_dataset("broken", lambda data_dir: np.zeros(3))
    with pytest.raises(FedcondError, match="its loader returned ndarray, not fedcond.data.ImageData or DomainData"):
        data_registry.load("broken")
    with pytest.raises(FedcondError, match="takes no options"):
        data_registry.load("toy_blobs", size=3)
    assert "plug-in's dataset" in data_registry.verify("toy_blobs")


def test_a_partition_registered_by_code_is_a_scenario_family_with_sweep_names(registries):
    from fedcond.experiments import select

    toy = _toy()
    fedcond.register_dataset("toy_blobs", toy.load_blobs)

    @fedcond.register_partition("evens_odds", clusters=True)
    def evens_odds(labels, num_classes, clients, rng):
        cluster = np.arange(clients) % 2
        parts = [np.zeros(0, np.int64)] * clients
        for g in (0, 1):
            members = np.flatnonzero(cluster == g)
            for m, chunk in zip(members, np.array_split(rng.permutation(np.flatnonzero(labels % 2 == g)), len(members))):
                parts[m] = chunk
        return parts, cluster

    spec = ScenarioSpec(family="Evens_Odds", dataset="toy_blobs", clients=4, seed=3)
    a, b = spec.build(), spec.build()
    assert spec.family == "evens_odds" and a.federation.num_clients == 4 and a.truth.known
    assert a.truth.cluster.tolist() == [0, 1, 0, 1]
    for i, c in enumerate(a.federation.clients):  # train and test labels follow the client's own parity
        assert {int(y) % 2 for y in c.y_train} == {i % 2} and {int(y) % 2 for y in c.y_test} == {i % 2}
        assert torch.equal(c.y_train, b.federation.clients[i].y_train)  # the same seed, the same split
    other = ScenarioSpec(family="evens_odds", dataset="toy_blobs", clients=4, seed=4).build()
    assert not torch.equal(other.federation.clients[0].y_train, a.federation.clients[0].y_train)
    assert [e.name for e in select("evens_odds/mnist/*")] == ["evens_odds/mnist/clients=20", "evens_odds/mnist/clients=100"]
    assert "Oracle" in select("evens_odds/mnist/clients=20")[0].methods
    with pytest.raises(FedcondError, match="does not apply to evens_odds"):
        ScenarioSpec(family="evens_odds", dataset="toy_blobs", clients=4, alpha=0.3).build()
    with pytest.raises(FedcondError, match="already registered"):
        fedcond.register_partition("dirichlet", lambda labels, C, n, rng: [])


@pytest.mark.parametrize(
    "returned, message",
    [
        (lambda labels, n: [np.arange(3)] * (n - 1), "returned 3 parts for 4 clients"),
        (lambda labels, n: [np.arange(2)] * n, "more than one client"),
        (lambda labels, n: [np.array([len(labels)])] + [np.zeros(0, np.int64)] * (n - 1), "outside 0.."),
        (lambda labels, n: [np.array([0.5])] * n, "not a 1-d array of sample indices"),
        (lambda labels, n: np.arange(n), "return one index array per client"),
    ],
)
def test_a_partition_that_returns_nonsense_is_refused_in_one_line(registries, returned, message):
    toy = _toy()
    fedcond.register_dataset("toy_blobs", toy.load_blobs)
    fedcond.register_partition("nonsense", lambda labels, C, n, rng: returned(labels, n))
    with pytest.raises(FedcondError, match=message) as err:
        ScenarioSpec(family="nonsense", dataset="toy_blobs", clients=4).build()
    assert "\n" not in str(err.value) and "partition 'nonsense'" in str(err.value)


def test_a_model_registered_by_code_is_built_by_name_and_conditioned_by_fedcond(registries):
    fedcond.load_plugins(EXAMPLE)
    plain = ModelSpec((1, 8, 8), 10, model="MLP")  # any case, as registered
    x = torch.randint(0, 256, (5, 1, 8, 8), dtype=torch.uint8)
    assert plain.build()(x, None).shape == (5, 10)
    assert Protocol(model="MLP").validate().model == "mlp"
    with pytest.raises(FedcondError, match="unknown model 'nope'; choose from mnist_cnn, cifar_cnn, light_cnn, mlp"):
        Protocol(model="nope").validate()
    s = torch.randn(5, 3)
    torch.manual_seed(0)
    concat = dataclasses.replace(plain, stat_dim=3).build()
    assert concat.head.in_features == 64 + 3 and concat(x, s).shape == (5, 10)
    assert concat.features(x, s).shape == (5, 67)
    torch.manual_seed(0)
    film = dataclasses.replace(plain, stat_dim=3, conditioning="film").build()
    torch.manual_seed(0)
    net = plain.build()
    net.load_state_dict({k: v for k, v in film.state_dict().items() if not k.startswith("film.")})
    assert torch.equal(film(x, s), net(x, None))  # FiLM starts as the identity modulation
    fedcond.register_model("bare", lambda shape, k: nn.Sequential(nn.Flatten(), nn.Linear(64, k)))
    assert ModelSpec((1, 8, 8), 10, model="bare").build()(x, None).shape == (5, 10)
    with pytest.raises(FedcondError, match="model 'bare' cannot be conditioned: give it features"):
        ModelSpec((1, 8, 8), 10, stat_dim=3, model="bare").build()
    fedcond.register_model("not_a_net", lambda shape, k: "net")
    with pytest.raises(FedcondError, match="its factory returned str, not a torch nn.Module"):
        ModelSpec((1, 8, 8), 10, model="not_a_net").build()


def test_structure_reading_methods_take_a_plugin_network_where_they_can_and_say_so_where_not(registries):
    from fedcond.jdfl.discovery import layer_names

    fedcond.load_plugins(EXAMPLE)
    net = ModelSpec((1, 8, 8), 10, model="mlp").build()
    assert layer_names(net, "A") == ("net.head.weight", "net.head.bias")  # JDFL's head-only subset
    with pytest.raises(FedcondError, match="layer subset B takes the last conv blocks .* use layers=A"):
        layer_names(net, "B")


def test_a_statistic_registered_by_code_conditions_a_run_on_a_plugin_dataset_and_model(registries):
    from fedcond.simulate import run_method

    toy = _toy()
    toy.register()  # dataset, a model that conditions itself, a statistic (the decorator form)
    toy.register()  # again (by hand and by its entry point): the same objects, no change
    assert STATISTICS["label_freq"].dim(32, 10) == 10
    scenario = ScenarioSpec(family="E1", dataset="toy_blobs", k=2, clients_per_cluster=2).build()
    protocol = Protocol(epochs=2, statistic="label_freq", model="toy_linear").validate()
    res = run_method(scenario, "Conditional", protocol, seed=0)
    assert res.accuracy > 0.5  # ten classes: chance is 0.1
    assert "plugins" not in res.extra  # registered by code: no module to record


def test_fedavgm_without_momentum_is_fedavg(registries):
    from fedcond.simulate import prepare_run, run_rounds

    toy = _toy()
    fedcond.load_plugins(EXAMPLE)
    fedcond.register_dataset("toy_blobs", toy.load_blobs)
    scenario = ScenarioSpec(family="E1", dataset="toy_blobs", k=2, clients_per_cluster=2).build()
    protocol = Protocol(epochs=3, model="mlp").validate()
    finals = {}
    for name in ("FedAvg", "FedAvgM(beta=0.0)", "FedAvgM(beta=0.9)"):
        run = prepare_run(scenario, name, protocol, seed=0)
        finals[name] = run_rounds(run.alg, run.ctx, run.alg.init(run.ctx), range(run.ctx.rounds), name).models[0]
    for k, v in finals["FedAvg"].items():
        assert torch.allclose(finals["FedAvgM(beta=0.0)"][k], v, atol=1e-6)
    assert not torch.allclose(finals["FedAvgM(beta=0.9)"]["net.head.weight"], finals["FedAvg"]["net.head.weight"])


# ---- (ii) --plugin reaches the worker processes ------------------------------------------------
@pytest.mark.slow
def test_run_with_a_plugin_finds_its_method_and_model_in_two_worker_processes(tmp_path):
    out = _fedcond(
        "run", "--plugin", EXAMPLE, "--methods", "FedAvgM(beta=0.5),FedAvg", "--model", "mlp", "--protocol", "smoke",
        "--k", "2", "--clients-per-cluster", "2", "--workers", "2", "--json", "--no-progress",
        "--db", str(tmp_path / "r.sqlite"),
    )
    assert out.returncode == 0, out.stderr
    rows = {r["method"]: r for r in json.loads(out.stdout)["results"]}
    assert set(rows) == {"FedAvgM(beta=0.5)", "FedAvg"}
    for r in rows.values():
        assert r["status"] == "ok" and r["extra"]["plugins"] == [EXAMPLE] and r["protocol"]["model"] == "mlp"
    assert rows["FedAvgM(beta=0.5)"]["hyperparameters"] == {"beta": 0.5, "server_lr": 1.0}
    shown = _fedcond("config", "show", str(rows["FedAvg"]["id"]), "--db", str(tmp_path / "r.sqlite"))
    assert 'plugin = ["examples.plugins.fedavgm"]' in shown.stdout and 'model = "mlp"' in shown.stdout, shown.stderr
    without = _fedcond("run", "--methods", "FedAvgM", "--db", str(tmp_path / "r.sqlite"))
    assert without.returncode == 2 and "unknown method 'FedAvgM'" in without.stderr


# ---- (ii b) $FEDCOND_PLUGINS: a process handed no list (a SuperNode, a Ray actor) -----------------
def test_the_environment_list_loads_like_plugin_and_a_bad_entry_is_one_line(tmp_path):
    env = _env(REPO)  # the repository importable from anywhere; the process starts elsewhere
    env[plugin_loading.PLUGINS_ENV] = f" {EXAMPLE} ,"
    code = (
        "from fedcond.algorithms import make_algorithm; from fedcond import plugin_loading as p; "
        "a = make_algorithm('FedAvgM(beta=0.5)'); print(type(a).__name__, a.beta, p.plugins_record())"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:2] == ["FedAvgM", "0.5"] and EXAMPLE in out.stdout  # rows record it
    env[plugin_loading.PLUGINS_ENV] = "no_such_plugin_module"
    bad = subprocess.run(
        [sys.executable, "-m", "fedcond.cli", "run", "--methods", "FedAvg", "--protocol", "smoke"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "$FEDCOND_PLUGINS no_such_plugin_module: cannot load it: ModuleNotFoundError" in bad.stderr


def test_export_hands_the_modules_and_the_working_directory_to_child_processes(monkeypatch, tmp_path):
    monkeypatch.setenv(plugin_loading.PLUGINS_ENV, "a.b")
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.chdir(tmp_path)
    plugin_loading.export_plugins(["c", "a.b"])
    assert os.environ[plugin_loading.PLUGINS_ENV] == "a.b,c"  # once each, the environment's first
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [str(tmp_path), "/somewhere"]


# ---- (iii) an installed distribution's entry point ---------------------------------------------
def _fake_distribution(site: Path) -> None:
    """What installing the toy package leaves on sys.path: the package and a dist-info whose
    entry_points.txt importlib.metadata reads."""
    import shutil

    shutil.copytree(TOY_PKG / "src" / "fedcond_toy_plugin", site / "fedcond_toy_plugin")
    info = site / "fedcond_toy_plugin-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fedcond-toy-plugin\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text('[fedcond.plugins]\ntoy = fedcond_toy_plugin:register\n')


def _check_entry_point_run(site: Path, db: Path) -> None:
    out = _fedcond(
        "run", "--dataset", "toy_blobs", "--model", "toy_linear", "--statistic", "label_freq", "--methods",
        "Conditional", "--epochs", "2", "--k", "2", "--clients-per-cluster", "2", "--workers", "1", "--json",
        "--no-progress", "--db", str(db), paths=[site], cwd=site,
    )
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["results"]
    assert row["status"] == "ok" and row["accuracy"] > 0.5
    assert row["extra"]["plugins"] == ["entry point toy = fedcond_toy_plugin:register"]
    assert row["scenario"]["dataset"] == "toy_blobs" and row["protocol"]["statistic"] == "label_freq"


def _fresh_entry_points(monkeypatch) -> None:
    monkeypatch.setattr(plugin_loading, "_entry_points", [])
    monkeypatch.setitem(plugin_loading._entry_points_state, "loaded", False)


def test_an_entry_point_registers_dataset_model_and_statistic_without_any_flag(
    registries, tmp_path, monkeypatch, capsys
):
    site = tmp_path / "site"
    site.mkdir()
    _fake_distribution(site)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv(plugin_loading.DISABLE_ENV, raising=False)
    _fresh_entry_points(monkeypatch)
    assert main(["scenario", "describe", "E1", "--dataset", "toy_blobs", "--clients-per-cluster", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dataset"] == "toy_blobs"  # the first name read loaded them
    assert plugin_loading.plugins_record() == ["entry point toy = fedcond_toy_plugin:register"]
    assert Protocol(model="Toy_Linear", statistic="label_freq").validate().model == "toy_linear"
    for registry in (data_registry.DATASETS, MODELS, STATISTICS):  # the one registry of each kind
        registry.pop("toy_blobs", None), registry.pop("toy_linear", None), registry.pop("label_freq", None)
    _fresh_entry_points(monkeypatch)
    monkeypatch.setenv(plugin_loading.DISABLE_ENV, "1")
    assert main(["scenario", "describe", "E1", "--dataset", "toy_blobs"]) == 2
    assert "unknown dataset 'toy_blobs'" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_on_an_entry_point_dataset_model_and_statistic_records_the_plugin(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _fake_distribution(site)
    _check_entry_point_run(site, tmp_path / "e.sqlite")


@pytest.mark.slow
def test_the_toy_package_installed_by_pip_is_found_by_its_entry_point(tmp_path):
    import shutil

    site, source = tmp_path / "site", tmp_path / "toy_plugin_pkg"
    shutil.copytree(TOY_PKG, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = subprocess.run(  # from a copy: a build writes into its source folder
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
         "--target", str(site), str(source)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    if pip.returncode != 0 and "No module named pip" in pip.stderr:
        pytest.skip("no pip in this environment")
    assert pip.returncode == 0, pip.stderr
    assert list(site.glob("fedcond_toy_plugin-*.dist-info/entry_points.txt"))
    _check_entry_point_run(site, tmp_path / "p.sqlite")


# ---- (iv) a sweep of a plug-in's method resumes ------------------------------------------------
@pytest.mark.slow
def test_a_sweep_of_a_plugin_method_skips_its_recorded_cells(tmp_path):
    shared_file("mnist.npz.xz")
    args = ["sweep", "E1/mnist/K=2/rich", "--protocol", "smoke", "--methods", "FedAvgM,FedAvg", "--workers", "2",
            "--no-progress", "--db", str(tmp_path / "s.sqlite"), "--data-dir", str(SHARED), "--plugin", EXAMPLE]
    first = _fedcond(*args)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {"planned": 2, "skipped": 0, "ran": 2, "failed": 0}
    again = _fedcond(*args)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"planned": 2, "skipped": 2, "ran": 0, "failed": 0}
    con = sqlite3.connect(tmp_path / "s.sqlite")
    rows = con.execute("SELECT method, status, extra FROM runs ORDER BY method").fetchall()
    assert [(m, s) for m, s, _ in rows] == [("FedAvg", "ok"), ("FedAvgM", "ok")]
    assert all(json.loads(extra)["plugins"] == [EXAMPLE] for _, _, extra in rows)


@pytest.mark.ray
@pytest.mark.slow
def test_ray_tasks_import_the_plugin_before_they_resolve_its_method(tmp_path):
    pytest.importorskip("ray")
    shared_file("mnist.npz.xz")
    out = _fedcond("sweep", "E1/mnist/K=2/rich", "--protocol", "smoke", "--methods", "FedAvgM", "--ray", "local",
                   "--no-progress", "--db", str(tmp_path / "ray.sqlite"), "--data-dir", str(SHARED), "--plugin", EXAMPLE)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"planned": 1, "skipped": 0, "ran": 1, "failed": 0}
    status, extra = sqlite3.connect(tmp_path / "ray.sqlite").execute("SELECT status, extra FROM runs").fetchone()
    assert status == "ok" and json.loads(extra)["plugins"] == [EXAMPLE]


def test_a_sweep_names_a_cell_by_the_model_as_registered(registries, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    for spelling in ("MLP", "mlp"):
        assert main(["sweep", "E1/mnist/K=2/rich", "--protocol", "smoke", "--methods", "fedavgm", "--model", spelling,
                     "--plugin", EXAMPLE, "--db", str(tmp_path / "d.sqlite"), "--dry-run"]) == 0
        assert "todo  E1/mnist/K=2/rich  FedAvgM  seed 0  [smoke[model=mlp]]" in capsys.readouterr().out


def test_a_configuration_file_names_its_plugins_as_a_list(registries, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    config = tmp_path / "sweep.toml"
    config.write_text(f'[sweep]\nplugin = ["{EXAMPLE}"]\nmodel = "MLP"\nmethods = ["FedAvgM"]\nprotocol = "smoke"\n')
    assert main(["sweep", "E1/mnist/K=2/rich", "--config", str(config), "--db", str(tmp_path / "d.sqlite"),
                 "--dry-run"]) == 0
    assert "todo  E1/mnist/K=2/rich  FedAvgM  seed 0  [smoke[model=mlp]]" in capsys.readouterr().out


# ---- (v) a bad plug-in is one line and exit 2 ----------------------------------------------------
@pytest.mark.parametrize(
    "source, message",
    [
        (None, "--plugin no_such_plugin_module: cannot load it: ModuleNotFoundError: No module named"),
        ("raise RuntimeError('broken\\non two lines')", "--plugin bad_plugin: cannot load it: RuntimeError: broken"),
        (
            "from fedcond.plugins import register_dataset\nregister_dataset('mnist', print)",
            "--plugin bad_plugin: dataset 'mnist' is already registered (as 'mnist'); choose another name",
        ),
    ],
)
def test_a_plugin_that_fails_is_one_line_and_exit_2(registries, tmp_path, monkeypatch, capsys, source, message):
    monkeypatch.chdir(tmp_path)
    name = "no_such_plugin_module" if source is None else "bad_plugin"
    if source is not None:
        (tmp_path / "bad_plugin.py").write_text(source)
    assert main(["run", "--plugin", name, "--methods", "FedAvg", "--db", str(tmp_path / "x.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedcond: error: {message}") and err.count("\n") == 1, err
