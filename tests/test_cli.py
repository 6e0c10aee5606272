"""The command line as a user meets it: JSON shapes, saved rows, one-line errors with exit code 2."""

import json
import sqlite3
import subprocess
import sys

import pytest

from fedcond.cli import main
from fedcond_testing import rows_so_far


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_json_and_database(capsys, tmp_path):
    db = tmp_path / "r.sqlite"
    code, out, err = run_cli(capsys, "run", "--methods", "FedAvg,Conditional", "--epochs", "1", "--k", "2",
                             "--workers", "1", "--json", "--no-progress", "--db", str(db))
    assert code == 0, err
    res = json.loads(out)["results"]
    assert [r["method"] for r in res] == ["FedAvg", "Conditional"]
    for r in res:
        assert 0 <= r["accuracy"] <= 1 and len(r["per_client"]) == 10 and r["seconds"] > 0
    rows = sqlite3.connect(db).execute("SELECT method, accuracy, per_client, git_rev, versions FROM runs ORDER BY id").fetchall()
    assert sorted(r[0] for r in rows) == ["Conditional", "FedAvg"]
    assert {r[0]: r[1] for r in rows}["FedAvg"] == res[0]["accuracy"]
    assert json.loads(rows[0][4])["torch"] and json.loads(rows[0][4])["cpu"].endswith(")")  # the CPU and its vector ISA


def test_scenario_describe_json(capsys):
    code, out, _ = run_cli(capsys, "scenario", "describe", "E1", "--dataset", "digits", "--k", "2",
                           "--clients-per-cluster", "3", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["family"] == "E1" and d["dataset"] == "digits" and len(d["clients"]) == 6
    c = d["clients"][0]
    assert set(c) >= {"id", "cluster", "n_train", "n_test", "train_labels", "test_labels"}
    assert sum(c["train_labels"].values()) == c["n_train"]
    assert set(c["train_labels"]) <= {"0", "1", "2", "3", "4"} or set(c["train_labels"]) <= {"5", "6", "7", "8", "9"}


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["scenario", "describe", "E9", "--json"], "unknown scenario family"),
        (["scenario", "describe", "E1", "--k", "11"], "K"),
        (["scenario", "describe", "E1", "--clients-per-cluster", "5000"], "fewer than"),
        (["run", "--methods", "Nope"], "unknown method"),
        (["scenario", "describe", "E1", "--dataset", "nosuch"], "nosuch"),
        (["run", "--methods", "FedProx(mu=abc)"], "mu must be a number"),
        (["run", "--methods", "IFCA(refine_rounds=1.5)"], "refine_rounds must be a whole number"),
        (["run", "--device", "nosuchdevice"], "unknown device"),
        (["run", "--statistic", "nope"], "unknown statistic"),
        (["scenario", "describe", "E1", "--groups", "0,1|1,2"], "a class appears in two groups"),
        (["scenario", "describe", "E3b", "--groups", "blocks"], "E1 and E2a only"),
        (["sweep", "E1/mnist/K=2/rich", "--dry-run", "--groups", "0,1,2|x"], "grouping name"),
        (["report", "--readme", "README.md", "--out", "/nonexistent/never"], "give --protocol too"),
        (["scenario", "describe", "E2b", "--rotations", "C9"], "not for --rotations 'C9'"),  # was: "not for dataset 'C9'"
        (["sweep", "E1/mnist\n/K=2", "--dry-run"], "no experiment matches 'E1/mnist\\n/K=2'"),  # echoed input, escaped
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, needle):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("fedcond: error:") and needle in err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["run", "--momentum", "1.5"], "--momentum: expected a number in [0, 1), got 1.5"),
        (["run", "--lr", "0"], "--lr: expected a number in (0, inf), got 0"),
        (["run", "--lr", "abc"], "--lr: expected a number, got 'abc'"),
        (["run", "--k", "x"], "--k: expected a whole number"),
        (["nosuchcommand"], "invalid choice"),
        # bounded at parse time: each was a traceback, a result lost at save, or a run that never ends
        (["run", "--seed", "-1"], "--seed: expected a whole number in [0, 4294967295], got -1"),
        (["run", "--seed", "999999999999999999999999"], "--seed: expected a whole number in [0, 4294967295]"),
        (["run", "--epochs", "99999999999999999999"], "--epochs: expected a whole number in [1, 10000]"),
        (["run", "--eval-every", "-1"], "--eval-every: expected a whole number in [0, 10000]"),
        (["sweep", "E1/mnist/K=2/rich", "--seeds", "0,-1"], "--seeds: expected a whole number in [0, 4294967295], got -1"),
        (["flower", "simulate", "--experiment", "E1/mnist/K=2/rich", "--method", "FedAvg", "--rounds", "0"],
         "--rounds: expected a whole number in [1, 10000]"),
        # empty text: each was silently the default, or (--seeds) a sweep of nothing
        (["run", "--db", ""], "--db: expected a value, got an empty one"),
        (["run", "--experiment", ""], "--experiment: expected a value"),
        (["run", "--groups", " "], "--groups: expected a value"),
        (["sweep", "E1/mnist/K=2/rich", "--seeds", ""], "--seeds: expected a comma list of seeds"),
        (["sweep", "E1/mnist/K=2/rich", "--groups", ""], "--groups: expected a value"),
        (["run", "--k", "2\n3"], "--k: expected a whole number, got '2\\n3'"),  # a newline in the input stays on the line
    ],
)
def test_argument_errors_are_one_line_exit_2(capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    _, err = capsys.readouterr()
    assert exc.value.code == 2
    assert len(err.splitlines()) == 1 and "error:" in err and needle in err


def test_optimiser_flags_reach_the_protocol(capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", "--methods", "FedAvg", "--epochs", "1", "--k", "2", "--lr", "0.05",
                             "--momentum", "0", "--workers", "1", "--json", "--no-progress", "--db", str(tmp_path / "r.sqlite"))
    assert code == 0, err
    row = sqlite3.connect(tmp_path / "r.sqlite").execute("SELECT protocol FROM runs").fetchone()
    protocol = json.loads(row[0])
    assert protocol["lr"] == 0.05 and protocol["momentum"] == 0.0


def test_missing_dataset_names_dir_variable_and_command(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fedcond.cli", "scenario", "describe", "E1", "--dataset", "mnist", "--data-dir", str(tmp_path)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert str(tmp_path) in proc.stderr and "FEDCOND_DATA" in proc.stderr and "fedcond data download mnist" in proc.stderr


@pytest.mark.slow
def test_default_run_acceptance(tmp_path):
    """`fedcond run` with no arguments (the README's main job), in a subprocess with its two workers:
    Conditional within 2 pp of Oracle, FedAvg clearly below both."""
    proc = subprocess.run([sys.executable, "-m", "fedcond.cli", "run", "--json", "--no-progress", "--db", str(tmp_path / "r.sqlite")],
                          capture_output=True, text=True, timeout=1800)  # a loaded machine took over 600 s
    assert proc.returncode == 0, proc.stderr
    acc = {r["method"]: r["accuracy"] for r in json.loads(proc.stdout)["results"]}
    assert set(acc) == {"Local", "FedAvg", "Gossip", "Ditto", "IFCA", "DAC", "Oracle", "Conditional", "Conditional-FedAvg"}
    assert acc["Conditional"] >= acc["Oracle"] - 0.02
    assert acc["FedAvg"] < min(acc["Conditional"], acc["Oracle"]) - 0.3


def test_run_under_an_experiment_name_is_seen_by_sweeps(capsys, tmp_path):
    from fedcond_testing import SHARED, shared_file

    shared_file("mnist.npz.xz")
    db = tmp_path / "e.sqlite"
    code, out, err = run_cli(capsys, "run", "--experiment", "E1/mnist/K=2/rich", "--methods", "FedAvg", "--epochs", "1",
                             "--workers", "1", "--no-progress", "--json", "--db", str(db), "--data-dir", str(SHARED))
    assert code == 0, err
    row = sqlite3.connect(db).execute("SELECT experiment, protocol_name, scenario FROM runs").fetchone()
    assert row[0] == "E1/mnist/K=2/rich" and row[1] == "paper[epochs=1]"  # named as a sweep names that cell
    assert json.loads(row[2])["clients_per_cluster"] == 5


def test_doctor_says_what_runs_here(capsys):
    code, out, err = run_cli(capsys, "doctor", "--json")
    assert code == 0, err
    info = json.loads(out)
    from fedcond.models.cpu_kernels import build, selfcheck

    assert info["vector_isa"] == build.vector_isa() and info["torch"]
    kernels = info["kernels"]
    assert set(kernels["each"]) == set(selfcheck.KERNELS)
    if kernels["not_built"] is None:
        from fedcond.models import cpu_kernels

        assert kernels["built_for"] in ("avx512", "avx2", "avx", "portable")
        timings = cpu_kernels.status().get("timings")
        if timings:  # every kernel on exactly where the self-check's rule keeps it
            decided = selfcheck.decide(timings)
            assert {n: e["on"] for n, e in kernels["each"].items()} == decided
    code, out, _ = run_cli(capsys, "doctor")
    assert code == 0 and "vector ISA" in out and "CPU kernels" in out


def test_device_without_its_runtime_is_one_line_exit_2(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    code, _, err = run_cli(capsys, "run", "--device", "cuda")
    assert code == 2 and err.count("\n") == 1 and "no usable CUDA" in err


def test_family_names_in_any_case(capsys):
    code, out, err = run_cli(capsys, "scenario", "describe", "e1", "--dataset", "digits", "--k", "2",
                             "--clients-per-cluster", "2", "--json")
    assert code == 0, err
    assert json.loads(out)["family"] == "E1"


def test_groups_by_name_or_explicit_are_recorded(capsys):
    from fedcond.run import ScenarioSpec

    code, out, err = run_cli(capsys, "scenario", "describe", "E1", "--dataset", "digits", "--groups", "0,2,3,4,6|1,5,7,8,9",
                             "--clients-per-cluster", "1", "--json")
    assert code == 0, err
    labels = [set(map(int, c["train_labels"])) for c in json.loads(out)["clients"]]
    assert labels == [{0, 2, 3, 4, 6}, {1, 5, 7, 8, 9}]  # K follows the explicit groups
    assert ScenarioSpec("E1", "fmnist", k=2).describe()["groups"] == "0,2,3,4,6|1,5,7,8,9"  # the default, semantic
    assert ScenarioSpec("E1", "fmnist", k=2, groups="blocks").describe()["groups"] == "0,1,2,3,4|5,6,7,8,9"
    assert ScenarioSpec("E2a", "fmnist", k=2).describe()["groups"] == "0,1,2,3,4,6|5,7,8,9"


def test_sweep_takes_run_protocol_options_and_names_the_cells_by_them(capsys, tmp_path):
    db = str(tmp_path / "r.sqlite")
    code, out, err = run_cli(capsys, "sweep", "E1/cifar10/K=2/rich", "--dry-run", "--db", db, "--methods", "Conditional",
                             "--encoder-source", "pacs32", "--groups", "blocks")
    assert code == 0, err
    assert "todo  E1/cifar10/K=2/rich  Conditional  seed 0  [paper[encoder_source=pacs32,groups=blocks]]" in out
    from fedcond.experiments import protocol, scenario_options

    name = "paper[encoder_source=pacs32,lr=0.02,groups=0,1|2,3]"
    proto, _ = protocol(name)
    assert proto.encoder_source == "pacs32" and proto.lr == 0.02 and scenario_options(name) == {"groups": "0,1|2,3"}
    code, out, _ = run_cli(capsys, "sweep", "E1/mnist/K=2/rich", "--dry-run", "--db", db, "--lr", "0.01")
    assert "[paper]" in out  # an option equal to the preset's changes nothing


def test_sweep_dry_run_marks_recorded_cells(capsys, tmp_path):
    db = tmp_path / "r.sqlite"
    code, _, err = run_cli(capsys, "sweep", "E1/mnist/K=2/rich", "--protocol", "smoke", "--methods", "Local", "--db", str(db),
                           "--data-dir", str(tmp_path / "none"), "--no-progress")
    from fedcond import results

    con = results.connect(db)
    results.save_run(con, family="E1", dataset="mnist", scenario={}, method="Local", seed=0, protocol={}, result=None,
                     experiment="E1/mnist/K=2/rich", protocol_name="smoke", status="failed", error="test")
    con.close()
    code, out, _ = run_cli(capsys, "sweep", "E1/mnist/K=2/rich", "--protocol", "smoke", "--methods", "Local,FedAvg",
                           "--db", str(db), "--dry-run")
    assert code == 0
    assert "done  E1/mnist/K=2/rich  Local  seed 0  [smoke]" in out and "todo  E1/mnist/K=2/rich  FedAvg  seed 0  [smoke]\n" in out
    assert out.strip().endswith("2 cells: 1 already in " + str(db) + ", 1 to run")  # a failed row gives no time

    from types import SimpleNamespace

    con = results.connect(db)
    done = SimpleNamespace(hyperparameters={}, accuracy=0.5, accuracy_std=0.0, weighted_accuracy=0.5, per_client=[],
                           extra={}, rounds=1, seconds=1800.0)
    results.save_run(con, family="E1", dataset="mnist", scenario={}, method="FedAvg", seed=0, protocol={}, result=done,
                     experiment="E1/mnist/K=2/rich", protocol_name="smoke")
    con.close()
    code, out, _ = run_cli(capsys, "sweep", "E1/mnist/K=2/rich", "--protocol", "smoke", "--methods", "Local,FedAvg,Oracle",
                           "--seeds", "1", "--db", str(db), "--dry-run")
    assert code == 0 and "todo  E1/mnist/K=2/rich  FedAvg  seed 1  [smoke]  ~30 min" in out
    summary, basis = out.strip().splitlines()[-2:]
    assert summary == ("3 cells: 0 already in " + str(db) + ", 3 to run"
                       " (~0.5 core-hours at the recorded times of like cells, CPU time where recorded; 2 with no like cell recorded)")
    from fedcond.estimate import this_machine

    assert basis == f"estimates for this {this_machine()} machine from {this_machine()} rows as recorded"
    code, out, _ = run_cli(capsys, "sweep", "E1/mnist/K=2/rich", "--protocol", "smoke", "--methods", "FedAvg", "--seeds", "1",
                           "--db", str(db), "--dry-run", "--ray", "local")
    assert code == 0 and out.strip().splitlines()[-1] == basis + "; --ray runs the cells on the cluster's nodes, perhaps of other kinds"


def test_sweep_dry_run_counts_only_the_rounds_a_checkpoint_leaves(capsys, tmp_path):
    from types import SimpleNamespace

    from fedcond import results
    from fedcond.experiments import EXPERIMENTS
    from fedcond.sweep import Cell, checkpoint_dir
    from fedcond.run import checkpoint_for

    db = tmp_path / "r.sqlite"
    pname = "smoke[epochs=4]"
    con = results.connect(db)
    done = SimpleNamespace(hyperparameters={}, accuracy=0.5, accuracy_std=0.0, weighted_accuracy=0.5, per_client=[],
                           extra={}, rounds=4, seconds=1800.0)
    results.save_run(con, family="E1", dataset="mnist", scenario={}, method="FedAvg", seed=0, protocol={}, result=done,
                     experiment="E1/mnist/K=2/rich", protocol_name=pname)
    con.close()
    spec, proto = Cell(EXPERIMENTS["E1/mnist/K=2/rich"], "FedAvg", 1, pname).setup(None)
    checkpoint_for(checkpoint_dir(str(db)), spec, "FedAvg", proto, 1).save(3, {}, [], 1350.0)  # 3 of 4 rounds done
    code, out, _ = run_cli(capsys, "sweep", "E1/mnist/K=2/rich", "--protocol", "smoke", "--epochs", "4", "--methods", "FedAvg",
                           "--seeds", "1,2", "--db", str(db), "--dry-run")
    assert code == 0
    assert f"todo  E1/mnist/K=2/rich  FedAvg  seed 1  [{pname}]  resumes after round 3 of 4  ~8 min" in out
    assert f"todo  E1/mnist/K=2/rich  FedAvg  seed 2  [{pname}]  ~30 min" in out
    assert "(~0.6 core-hours" in out  # 7.5 + 30 minutes
    code, out, _ = run_cli(capsys, "sweep", "E1/mnist/K=2/rich", "--protocol", "smoke", "--epochs", "4", "--methods", "FedAvg",
                           "--seeds", "1", "--db", str(db), "--dry-run", "--checkpoint-every", "0")
    assert code == 0 and "resumes" not in out and "~30 min" in out  # without checkpoints every cell starts afresh


def test_one_registry_lists_the_earlier_study_too(capsys):
    code, out, _ = run_cli(capsys, "experiments", "list", "MCDC/*")
    assert code == 0 and "MCDC/linreg/3clusters" in out
    code, out, _ = run_cli(capsys, "experiments", "list")
    assert "MCDC/emnist/nc=8" in out and "E1/mnist/K=2/rich" in out


def test_sigterm_stops_workers_cleanly_and_keeps_finished_rows(tmp_path):
    """SIGTERM mid-run: exit 143, the rows of finished methods stay, no leaked semaphores, no orphans."""
    import os
    import signal
    import time

    db = tmp_path / "r.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "fedcond.cli", "run", "--methods", "Oracle,Ditto", "--workers", "2",
                             "--db", str(db), "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600  # a bound for a loaded machine; it returns as soon as Oracle's row lands
    rows = []
    while time.time() < deadline and not rows:
        time.sleep(0.5)
        rows = rows_so_far(db, "SELECT method FROM runs")
        assert proc.poll() is None, proc.communicate()
    assert rows == [("Oracle",)], "Oracle should finish long before Ditto"
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "leaked" not in err and "Traceback" not in err and "interrupted" in err
    assert sqlite3.connect(db).execute("SELECT method FROM runs").fetchall() == [("Oracle",)]


def test_sweep_names_each_cell_by_the_options_that_apply_to_it(capsys, tmp_path):
    db = str(tmp_path / "r.sqlite")
    code, out, err = run_cli(capsys, "sweep", "E1/fmnist/K=2/rich,E3a/mnist/K=2/rich,E1/mnist/K=2/rich", "--dry-run",
                             "--db", db, "--methods", "Local,Local", "--seeds", "0,0", "--groups", "blocks")
    assert code == 0, err
    lines = [ln for ln in out.splitlines() if ln.startswith("todo")]
    assert lines == ["todo  E1/fmnist/K=2/rich  Local  seed 0  [paper[groups=blocks]]",  # in the list's order
                     "todo  E3a/mnist/K=2/rich  Local  seed 0  [paper]",  # no grouping in E3a; duplicates dropped
                     "todo  E1/mnist/K=2/rich  Local  seed 0  [paper]"]  # MNIST's blocks are its default groups
    code, _, err = run_cli(capsys, "sweep", "E1/mnist/K=2/rich", "--dry-run", "--db", db, "--holdout-clients", "5")
    assert code == 2 and "at least one must stay in training" in err
    code, _, err = run_cli(capsys, "sweep", "E1/cifar100/K=20/rich", "--dry-run", "--db", db, "--groups", "blocks")
    assert code == 2 and "CIFAR-100" in err


def test_run_under_an_experiment_name_records_its_options_in_the_cell_name(capsys, tmp_path):
    db = tmp_path / "r.sqlite"
    argv = ["run", "--experiment", "E1/mnist/K=2/rich", "--dataset", "digits", "--methods", "Local", "--epochs", "1",
            "--workers", "1", "--no-progress", "--db", str(db), "--data-dir", str(tmp_path / "none")]
    code, _, err = run_cli(capsys, *argv)  # MNIST is not in that folder: a clear error, nothing recorded
    assert code == 2 and "not found" in err
    from fedcond.experiments import EXPERIMENTS, cell_changes, variant_name  # the naming run and sweep share

    exp = EXPERIMENTS["E1/fmnist/K=2/rich"]
    assert variant_name("paper", cell_changes(exp, {"epochs": 1, "groups": "semantic"})) == "paper[epochs=1]"
    assert variant_name("paper", cell_changes(exp, {"groups": "0,1,2,3,4|5,6,7,8,9"})) == "paper[groups=0,1,2,3,4|5,6,7,8,9]"


def test_run_records_a_failed_method_runs_the_rest_and_exits_non_zero(capsys, tmp_path):
    """As a sweep does: a method that diverges is a failed row, the next method still runs, and the
    exit status and one last line say so (it stopped at the first and recorded nothing)."""
    db = tmp_path / "r.sqlite"
    code, out, err = run_cli(capsys, "run", "--methods", "FedAvg,Local", "--lr", "1e12", "--epochs", "1", "--k", "2",
                             "--clients-per-cluster", "2", "--workers", "1", "--no-progress", "--db", str(db))
    assert code == 1, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("fedcond: 2 of 2 methods failed") and "FedAvg: " in last and "Local: " in last
    rows = sqlite3.connect(db).execute("SELECT method, status, error, accuracy FROM runs ORDER BY method").fetchall()
    assert [(m, st, acc) for m, st, _, acc in rows] == [("FedAvg", "failed", None), ("Local", "failed", None)]
    assert all("diverged" in e for _, _, e, _ in rows)
    assert "FedAvg" in out and "FAILED" in out


def test_run_json_carries_every_field_of_the_row(capsys, tmp_path):
    """--json gives what the database row holds: configuration, ARI, the --eval-every curve, the
    unseen accuracy, versions, revision; it gave accuracy and little else."""
    db = tmp_path / "r.sqlite"
    code, out, err = run_cli(capsys, "run", "--methods", "IFCA,Conditional", "--epochs", "2", "--eval-every", "1",
                             "--holdout-clients", "1", "--k", "2", "--clients-per-cluster", "3", "--seed", "3",
                             "--workers", "1", "--json", "--no-progress", "--db", str(db))
    assert code == 0, err
    res = {r["method"]: r for r in json.loads(out)["results"]}
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    for row in con.execute("SELECT * FROM runs"):
        printed = res[row["method"]]
        for column in row.keys():
            value = row[column]
            if column in ("scenario", "protocol", "hyperparameters", "per_client", "extra", "versions"):
                value = json.loads(value)
            assert printed[column] == value, column
    assert 0 <= res["IFCA"]["extra"]["ari"] <= 1
    assert [point[0] for point in res["Conditional"]["extra"]["curve"]] == [1, 2]
    assert 0 <= res["Conditional"]["unseen_accuracy"] <= 1 and res["Conditional"]["extra"]["unseen_accuracy"] >= 0
    assert res["Conditional"]["seed"] == 3 and res["Conditional"]["protocol"]["holdout_clients"] == 1
    assert res["Conditional"]["scenario"]["k"] == 2 and res["Conditional"]["versions"]["torch"]


def test_sweep_that_could_not_run_a_cell_exits_non_zero_and_names_it(capsys, tmp_path):
    """A damaged dataset: the sweep said `"unavailable": 1` and exited 0."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "mnist.npz.xz").write_bytes(b"not an archive")
    code, out, err = run_cli(capsys, "sweep", "E1/mnist/K=2/rich", "--protocol", "smoke", "--methods", "Local,FedAvg",
                             "--no-progress", "--db", str(tmp_path / "r.sqlite"), "--data-dir", str(data))
    assert code == 1, err
    assert json.loads(out)["unavailable"] == 2 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("fedcond: 2 cell(s) could not run") and "E1/mnist/K=2/rich Local,FedAvg seed 0 [smoke]" in last


def test_a_reader_that_leaves_early_gets_no_traceback():
    """`fedcond experiments list | head -1`: the pipe closes before the listing is written; the command
    stops quietly with 141 (128 + SIGPIPE), as a shell tool does, not with a BrokenPipeError traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "fedcond.cli", "experiments", "list"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # before the interpreter has even started: every write fails
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err and err == ""
