"""Sweeps: resume without loss or duplication, even after SIGKILL; failures recorded; registry coverage."""

import csv
import json
import os
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from importlib import resources

import pytest

from fedcond.algorithms import hyperparameters, make_algorithm
from fedcond import results
from fedcond.errors import FedcondError
from fedcond.estimate import Estimator
from fedcond.experiments import EXPERIMENTS, PROTOCOLS, select
from fedcond.protocol import PAPER
from fedcond.sweep import Cell, plan, run_sweep
from fedcond_testing import SHARED, rows_so_far, shared_file


def test_every_published_setting_has_an_experiment():
    rows = list(csv.DictReader(resources.files("fedcond.resources").joinpath("paper_results.csv").open()))
    covered = {(t, e.dataset, s) for e in EXPERIMENTS.values() for t, s in (e.paper_setting or {}).items()}
    missing = {(r["table"], r["dataset"], r["setting"]) for r in rows} - covered
    assert not missing, sorted(missing)
    standard = ("dirichlet/", "pathological/", "shards/", "quantity/")
    assert len([e for e in EXPERIMENTS if not e.startswith(("JDFL/", "MCDC/", *standard))]) == 103  # the paper's (Part A)
    assert len([e for e in EXPERIMENTS if e.startswith(standard)]) == 24  # 8 standard partitions x 3 datasets
    assert len([e for e in EXPERIMENTS if e.startswith("MCDC/")]) == 10  # the earlier study's (Part B), same registry
    assert len([e for e in EXPERIMENTS if e.startswith("JDFL/")]) == 11  # main, ablation, replicate, random_per_sample, m_sweep x 2 + discovery


def test_select_by_glob_and_error_names_closest():
    assert {e.name for e in select("E1/mnist/K=*/rich")} == {f"E1/mnist/K={k}/rich" for k in (2, 3, 5, 10)}
    with pytest.raises(FedcondError, match="closest: E1/mnist/K=2/rich"):
        select("E1/mnist/K=2/rch")


def test_a_comma_list_runs_in_its_order_each_once_and_every_item_must_match():
    names = [e.name for e in select("E3a/mnist/K=2/rich, E1/mnist/K=*/rich ,E1/mnist/K=2/rich,E2a/mnist/K=2/rich")]
    assert names == ["E3a/mnist/K=2/rich", *(f"E1/mnist/K={k}/rich" for k in (2, 3, 5, 10)), "E2a/mnist/K=2/rich"]
    with pytest.raises(FedcondError, match="no experiment matches 'E3a/mnist/K=2/rch'; closest: E3a/mnist/K=2/rich"):
        select("E1/mnist/K=2/rich,E3a/mnist/K=2/rch")  # a typo in a list is not silently dropped
    with pytest.raises(FedcondError, match="no experiment named"):
        select(" , ")


def _rows(db):
    return rows_so_far(db, "SELECT experiment, method, seed, protocol_name, status FROM runs")


def test_resume_skips_finished_cells_and_the_index_forbids_duplicates(tmp_path):
    shared_file("mnist.npz.xz")
    db = tmp_path / "s.sqlite"
    cells = plan(select("E1/mnist/K=2/rich"), "FedAvg,Local", [0], "smoke")
    first = run_sweep(cells[:1], str(db), str(SHARED), workers=1, progress=False, log=lambda s: None)
    assert first["ran"] == 1
    again = run_sweep(cells, str(db), str(SHARED), workers=1, progress=False, log=lambda s: None)
    assert again == {"planned": 2, "skipped": 1, "ran": 1, "failed": 0}
    rows = _rows(db)
    assert sorted(r[1] for r in rows) == ["FedAvg", "Local"] and all(r[4] == "ok" for r in rows)
    con = results.connect(db)
    with pytest.raises(sqlite3.IntegrityError):
        con.execute("INSERT INTO runs (created_at, experiment, protocol_name, family, dataset, scenario, method, seed, protocol,"
                    " hyperparameters, extra, device, versions, git_rev) VALUES ('t','E1/mnist/K=2/rich','smoke','E1','mnist','{}',"
                    "'FedAvg',0,'{}','{}','{}','cpu','{}','x')")



def test_rows_name_the_commit_the_process_loaded_not_a_later_one(tmp_path, monkeypatch):
    """A sweep runs for hours while commits land: each row names the revision read when the code
    was imported, without asking git again."""
    shared_file("mnist.npz.xz")
    loaded = results.git_revision()

    def later_commit(*args, **kwargs):
        raise AssertionError("git asked again after import")
    monkeypatch.setattr("fedcond.version.subprocess.run", later_commit)  # where the revision is read (version.py)
    db = tmp_path / "s.sqlite"
    run_sweep(plan(select("E1/mnist/K=2/rich"), "Local", [0], "smoke"), str(db), str(SHARED), workers=1,
              progress=False, log=lambda s: None)
    assert sqlite3.connect(db).execute("SELECT git_rev FROM runs").fetchall() == [(loaded,)]

def _timed_row(con, name, method, seconds, seed=0, status="ok", device="cpu", ran_with=None, cpu_seconds=None):
    """A paper-protocol row of `name` that took `seconds` (ran_with: the versions it records; None: this machine's;
    cpu_seconds: the CPU time it records, None: a row from before CPU time was kept)."""
    from types import SimpleNamespace

    e = EXPERIMENTS[name]
    extra = {} if cpu_seconds is None else {"cpu_seconds": cpu_seconds}
    done = SimpleNamespace(hyperparameters={}, accuracy=0.5, accuracy_std=0.0, weighted_accuracy=0.5, per_client=[],
                           extra=extra, rounds=20, seconds=seconds)
    results.save_run(con, family=e.family, dataset=e.dataset, scenario={"clients_per_cluster": e.clients_per_cluster},
                     method=method, seed=seed, protocol={}, result=done if status == "ok" else None, experiment=name,
                     protocol_name="paper", status=status, error=None if status == "ok" else "diverged", device=device,
                     ran_with=ran_with)


def test_a_cell_to_run_is_estimated_from_the_recorded_cells_most_like_it(tmp_path):
    con = results.connect(tmp_path / "r.sqlite")

    def row(name, method, seconds, status="ok"):
        _timed_row(con, name, method, seconds, status=status)

    row("E1/mnist/K=2/rich", "Local", 100.0)
    row("E3a/mnist/K=2/rich", "Local", 300.0)
    row("E3a/mnist/K=2/rich", "FedAvg", 5000.0, status="failed")  # a failed row says nothing of the time
    row("E1/mnist/K=2/super_sparse", "Gossip", 700.0)

    def cell(name, method, seed=1):
        return Cell(EXPERIMENTS[name], method, seed, "paper")

    estimator = Estimator(con)
    got = [estimator.seconds(c) for c in [
        cell("E1/mnist/K=2/rich", "Local"),  # the same cell, another seed
        cell("E3b/mnist/K=2/rich", "Local", 0),  # the same dataset and sparsity: median of 100 and 300
        cell("E1/mnist/K=2/super_sparse", "Local", 0),  # the same family and dataset, another sparsity
        cell("E2a/mnist/K=2/super_sparse", "Local", 0),  # the same dataset only: median of 100 and 300
        cell("E2a/mnist/K=2/super_sparse", "Gossip(independent_init=false)", 0),  # the method's base name
        cell("E1/fmnist/K=2/rich", "Local", 0),  # nothing like it
        cell("E1/mnist/K=2/rich", "FedAvg", 0),  # only a failed row
    ]]
    con.close()
    assert got == [100.0, 200.0, 100.0, 200.0, 700.0, None, None]


def test_a_method_never_run_on_a_dataset_is_estimated_by_its_cost_over_fedavg_elsewhere(tmp_path):
    con = results.connect(tmp_path / "r.sqlite")
    # Ditto costs 4x and 6x FedAvg where both ran (median 5x); CIFAR-10 has FedAvg only
    for name, fedavg, ditto in (("E1/mnist/K=2/rich", 100.0, 400.0), ("E3a/mnist/K=2/rich", 200.0, 1200.0)):
        _timed_row(con, name, "FedAvg", fedavg)
        _timed_row(con, name, "Ditto", ditto)
    _timed_row(con, "E1/cifar10/K=2/rich", "FedAvg", 1000.0)
    estimator = Estimator(con)
    con.close()
    cifar = EXPERIMENTS["E1/cifar10/K=2/rich"]
    assert estimator.seconds(Cell(cifar, "Ditto", 0, "paper")) == 5000.0
    assert estimator.seconds(Cell(cifar, "Ditto(personal_epochs=1)", 0, "paper")) == 5000.0  # by its base name
    assert estimator.seconds(Cell(cifar, "IFCA", 0, "paper")) is None  # never run anywhere: no ratio, no guess
    assert estimator.seconds(Cell(EXPERIMENTS["E1/fmnist/K=2/rich"], "Ditto", 0, "paper")) is None  # no FedAvg there
    assert "Ditto as FedAvg x5.00 (its median ratio over 2 settings that ran both)" in estimator.basis()


def test_a_rows_cpu_time_is_its_cost_where_it_recorded_one(tmp_path):
    con = results.connect(tmp_path / "r.sqlite")
    # two seeds of one cell: the first beside other runs (wall 900 s, CPU 400 s), the second before CPU was kept
    _timed_row(con, "E1/mnist/K=2/rich", "Local", 900.0, seed=0, cpu_seconds=400.0)
    _timed_row(con, "E1/mnist/K=2/rich", "Local", 500.0, seed=1)
    _timed_row(con, "E3a/mnist/K=2/rich", "FedAvg", 900.0, cpu_seconds=300.0)
    # a row whose extra holds a NaN (an empty cluster's accuracy), which SQLite's JSON functions refuse: its wall time
    _timed_row(con, "E3b/mnist/K=2/rich", "Local", 700.0)
    con.execute("""UPDATE runs SET extra = '{"cluster_accuracy": NaN, "cpu_seconds": 1.0}' WHERE experiment LIKE 'E3b%'""")
    con.commit()
    estimator = Estimator(con)
    con.close()
    assert estimator.seconds(Cell(EXPERIMENTS["E1/mnist/K=2/rich"], "Local", 2, "paper")) == 450.0  # median(400, 500)
    assert estimator.seconds(Cell(EXPERIMENTS["E3a/mnist/K=2/rich"], "FedAvg", 1, "paper")) == 300.0
    assert estimator.seconds(Cell(EXPERIMENTS["E3b/mnist/K=2/rich"], "Local", 1, "paper")) == 700.0


def test_rows_from_another_kind_of_machine_are_scaled_by_the_ratio_the_database_shows(tmp_path):
    from fedcond.estimate import machine_kind

    con = results.connect(tmp_path / "r.sqlite")

    def row(name, method, seed, seconds, cpu=None, device="cpu", model="Some CPU"):
        _timed_row(con, name, method, seconds, seed=seed, device=device,
                   ran_with={"cpu": f"{model} ({cpu}; torch uses {cpu})"} if cpu else {"torch": "x"})

    AVX512, AVX2 = "cpu avx512 (Some CPU)", "cpu avx2 (Some CPU)"  # kinds: the ISA and the CPU model

    row("E1/mnist/K=2/rich", "Local", 0, 100.0, "avx512")
    row("E1/mnist/K=2/rich", "Local", 1, 250.0, "avx2")  # 2.5x longer here
    row("E3a/mnist/K=2/rich", "Local", 0, 100.0, "avx512")
    row("E3a/mnist/K=2/rich", "Local", 1, 300.0, "avx2")  # 3x: the median ratio is 2.75
    row("E1/mnist/K=2/rich", "Local", 2, 190.0, "avx512")  # run beside others: the fastest time counts
    row("E1/mnist/K=2/rich", "FedAvg", 0, 200.0, "avx512")
    row("E1/mnist/K=2/rich", "FedAvg", 1, 5000.0)  # no CPU recorded, beside a row that can be scaled: left out
    row("E1/mnist/K=2/rich", "Oracle", 0, 10.0, device="cuda")  # no cell ran both here and on the GPU
    row("E1/fmnist/K=2/rich", "Local", 0, 40.0)  # a row that did not record its CPU
    assert [machine_kind(*r) for r in con.execute("SELECT device, versions FROM runs ORDER BY id")] == \
        [AVX512, AVX2] * 2 + [AVX512] * 2 + [None, "cuda", None]

    def cell(name, method):
        return Cell(EXPERIMENTS[name], method, 3, "paper")

    on_avx2 = Estimator(con, here=AVX2)
    assert on_avx2.ratios == {AVX512: (2.75, 2)}
    assert on_avx2.seconds(cell("E1/mnist/K=2/rich", "Local")) == 250.0  # this kind's own rows, the others ignored
    assert on_avx2.basis() == "estimates for this cpu avx2 (Some CPU) machine from cpu avx2 (Some CPU) rows as recorded"
    assert on_avx2.seconds(cell("E1/mnist/K=2/rich", "FedAvg")) == 550.0  # 200 s on AVX-512, x2.75
    assert on_avx2.seconds(cell("E1/mnist/K=2/rich", "Oracle")) == 10.0
    assert on_avx2.seconds(cell("E1/fmnist/K=2/rich", "Local")) == 40.0
    assert on_avx2.basis() == ("estimates for this cpu avx2 (Some CPU) machine from cpu avx2 (Some CPU) rows as recorded;"
                               " rows of machines that did not record their CPU unscaled (no cell recorded on both; times here"
                               " may differ 2-3x); cpu avx512 (Some CPU) rows x2.75 (the median ratio over 2 cells recorded"
                               " on both);"
                               " cuda rows unscaled (no cell recorded on both; times here may differ 2-3x)")
    on_avx512 = Estimator(con, here=AVX512)
    assert on_avx512.seconds(cell("E1/mnist/K=2/rich", "FedAvg")) == 200.0
    assert on_avx512.seconds(cell("E1/mnist/K=2/rich", "Local")) == 145.0  # the median of 100 and 190
    assert on_avx512.ratios[AVX2] == (statistics.median([100 / 250, 100 / 300]), 2)
    # Another CPU model with the same ISA is another kind: one that ran only a variant of a method
    # (no cell in common) gets its ratio from the method's other rows, the same dataset and base name.
    row("E1/mnist/K=2/rich", "Gossip(independent_init=false)", 0, 130.0, "avx512", model="Other CPU")
    row("E1/mnist/K=2/rich", "Gossip", 0, 100.0, "avx512")
    row("E1/mnist/K=2/rich", "Gossip", 1, 250.0, "avx2")
    other = Estimator(con, here="cpu avx512 (Other CPU)")
    assert other.ratios == {AVX512: (1.3, 1), AVX2: (130.0 / 250, 1)} and set(other.ratio_level.values()) == {4}
    assert other.seconds(cell("E1/mnist/K=2/rich", "FedAvg")) == 260.0  # 200 s on the first AVX-512 CPU, x1.3
    assert other.basis() == ("estimates for this cpu avx512 (Other CPU) machine from cpu avx512 (Some CPU) rows x1.30"
                             " (the median ratio over 1 like cell recorded on both; one cell: rough)")
    assert Estimator(con, here=AVX512).ratio_level[AVX2] == 0  # the same cells recorded on both
    con.close()


def test_divergence_is_recorded_as_failed_and_the_sweep_goes_on(tmp_path, monkeypatch):
    shared_file("mnist.npz.xz")
    monkeypatch.setitem(PROTOCOLS, "explode", (PAPER.replace(epochs=1, lr=1e12), 0.02))
    db = tmp_path / "f.sqlite"
    cells = plan(select("E1/mnist/K=2/rich"), "FedAvg", [0], "explode") + plan(select("E1/mnist/K=2/rich"), "FedAvg", [0], "smoke")
    counts = run_sweep(cells, str(db), str(SHARED), workers=1, progress=False, log=lambda s: None)
    assert counts["failed"] == 1 and counts["ran"] == 1
    row = sqlite3.connect(db).execute(
        "SELECT status, error, accuracy, hyperparameters FROM runs WHERE protocol_name='explode'"
    ).fetchone()
    assert row[0] == "failed" and "diverged" in row[1] and row[2] is None
    assert json.loads(row[3]) == hyperparameters(make_algorithm("FedAvg"))  # a failed row says what it ran


def test_sigkill_mid_sweep_loses_and_duplicates_nothing(tmp_path):
    shared_file("mnist.npz.xz")
    db = tmp_path / "k.sqlite"
    cmd = [sys.executable, "-m", "fedcond.cli", "sweep", "E1/mnist/K=2/rich,E1/mnist/K=3/rich", "--protocol", "smoke",
           "--methods", "FedAvg,Local,Oracle", "--workers", "1", "--no-progress", "--db", str(db), "--data-dir", str(SHARED)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline:  # wait for the first finished cell, then kill without warning
        if len(_rows(db)) >= 1:
            break
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _rows(db)
    assert 1 <= len(before) < 6
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    counts = json.loads(out.stdout)
    after = _rows(db)
    assert counts["skipped"] == len(before) and counts["ran"] == 6 - len(before)
    assert len(after) == len(set(after)) == 6
    assert set(before) <= set(after)


@pytest.mark.ray
def test_sweep_over_a_local_ray_instance_then_resume(tmp_path):
    pytest.importorskip("ray")
    shared_file("mnist.npz.xz")
    db = tmp_path / "ray.sqlite"
    cells = plan(select("E1/mnist/K=2/rich"), "FedAvg,Local", [0], "smoke")
    counts = run_sweep(cells, str(db), str(SHARED), progress=False, log=lambda s: None, ray_address="local")
    assert counts == {"planned": 2, "skipped": 0, "ran": 2, "failed": 0}
    # the same cells without Ray: identical numbers (one thread, same seed), and nothing to rerun
    local = run_sweep(cells, str(tmp_path / "local.sqlite"), str(SHARED), workers=1, progress=False, log=lambda s: None)
    assert local["ran"] == 2
    q = "SELECT method, accuracy FROM runs ORDER BY method"
    assert sqlite3.connect(db).execute(q).fetchall() == sqlite3.connect(tmp_path / "local.sqlite").execute(q).fetchall()
    again = run_sweep(cells, str(db), str(SHARED), progress=False, log=lambda s: None, ray_address="local")
    assert again["skipped"] == 2 and again["ran"] == 0


@pytest.mark.ray
def test_ray_workers_run_at_the_callers_priority(monkeypatch):
    """Ray's default puts its workers at niceness 15, where they starve beside any other work."""
    pytest.importorskip("ray")
    from fedcond import ray_backend

    monkeypatch.setenv(ray_backend.WORKER_NICENESS_ENV, "15")
    monkeypatch.delenv(ray_backend.WORKER_NICENESS_ENV)  # unset for the test, restored after it
    monkeypatch.setattr(ray_backend, "_cell", lambda *task: (os.nice(0), {}))  # the task reports its niceness
    ((_, niceness, _),) = list(ray_backend.run_cells_on_ray([(None, None, None, None)], "local"))
    assert niceness == os.nice(0)


def test_rows_from_ray_record_the_versions_of_the_node_that_ran_them(tmp_path, monkeypatch):
    from fedcond import ray_backend
    from fedcond.run import Failure

    node = {"cpu": "a node's CPU (avx2; torch uses avx2)", "torch": "9.9", "denormals": "keep"}

    def fake_ray(tasks, address):  # the cells "ran" on a node whose versions differ from this process's
        for i, (spec, method, proto, seed) in enumerate(tasks):
            yield i, Failure(method, "stands in for a run"), node

    monkeypatch.setattr(ray_backend, "run_cells_on_ray", fake_ray)
    cells = plan(select("E1/mnist/K=2/rich"), "FedAvg", [0], "smoke")
    run_sweep(cells, str(tmp_path / "r.sqlite"), str(SHARED), progress=False, log=lambda s: None, ray_address="auto")
    (recorded,) = sqlite3.connect(tmp_path / "r.sqlite").execute("SELECT versions FROM runs").fetchone()
    assert json.loads(recorded) == node != results.versions()


def test_superseded_rows_leave_the_tables_and_are_run_again(tmp_path):
    from fedcond import results

    con = results.connect(tmp_path / "r.sqlite")
    for method in ("Gossip", "FedAvg"):
        results.save_run(con, family="E1", dataset="mnist", scenario={}, method=method, seed=0, protocol={}, result=None,
                         experiment="E1/mnist/K=2/rich", protocol_name="paper", status="failed", error="x")
    moved = results.supersede(con, "method = ? AND protocol_name = ?", ("Gossip", "paper"), "Gossip default changed")
    assert moved == 1
    assert results.finished_cells(con) == {("E1/mnist/K=2/rich", "FedAvg", 0, "paper")}
    assert results.superseded(con) == [("Gossip default changed", 1)]
    results.save_run(con, family="E1", dataset="mnist", scenario={}, method="Gossip", seed=0, protocol={}, result=None,
                     experiment="E1/mnist/K=2/rich", protocol_name="paper", status="failed", error="rerun")  # no clash
    con.close()


def test_an_exact_name_selects_that_experiment_only():
    assert [e.name for e in select("E4a/mnist+fmnist/clients=10")] == ["E4a/mnist+fmnist/clients=10"]
    assert len(select("E4a/mnist+fmnist/clients=1")) == 2  # not a name: text inside names (10, 100)


def test_a_cell_killed_mid_run_resumes_from_its_checkpoint_and_matches_an_uninterrupted_sweep(tmp_path):
    """SIGKILL during a cell's fourth round: the rerun starts from the last checkpoint (saved after
    every round here), records the same numbers as a sweep never stopped, and leaves no checkpoint."""
    shared_file("mnist.npz.xz")
    db = tmp_path / "c.sqlite"
    ckpts = tmp_path / "c.sqlite.checkpoints"
    args = ["E1/mnist/K=2/rich", "--protocol", "smoke", "--epochs", "6", "--methods", "FedAvg", "--workers", "1",
            "--no-progress", "--data-dir", str(SHARED)]
    cmd = [sys.executable, "-m", "fedcond.cli", "sweep", *args, "--db", str(db), "--checkpoint-every", "0.001"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    saved = None
    while time.time() < deadline and proc.poll() is None:  # wait until round 3 is saved, then kill without warning
        files = list(ckpts.glob("*.pt")) if ckpts.exists() else []
        if files:
            from fedcond import safe_state

            try:
                saved = safe_state.read(files[0])[0]["rounds_done"]  # the header, as the sweep's dry run reads it
            except Exception:  # noqa: BLE001 - being replaced as we read: look again
                saved = None
            if saved is not None and saved >= 3:
                break
        time.sleep(0.05)
    assert proc.poll() is None, f"the sweep ended before a checkpoint of round 3 was seen (last read: {saved})"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert saved is not None and 3 <= saved < 6 and _rows(db) == []
    plan = subprocess.run([*cmd, "--dry-run"], capture_output=True, text=True, timeout=120)
    assert re.search(r"todo  E1/mnist/K=2/rich  FedAvg  seed 0  \[smoke\[epochs=6\]\]  resumes after round [3-5] of 6", plan.stdout), plan
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    ref = tmp_path / "ref.sqlite"
    out = subprocess.run([sys.executable, "-m", "fedcond.cli", "sweep", *args, "--db", str(ref), "--checkpoint-every", "0"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    q = "SELECT method, accuracy, per_client, rounds, extra FROM runs"
    (resumed,), (whole,) = sqlite3.connect(db).execute(q).fetchall(), sqlite3.connect(ref).execute(q).fetchall()
    assert resumed[:4] == whole[:4]
    assert json.loads(resumed[4])["resumed_after_round"] >= saved  # it may have saved once more before the kill
    assert json.loads(resumed[4])["cpu_seconds"] > 0 and json.loads(whole[4])["cpu_seconds"] > 0
    assert "resumed_after_round" not in json.loads(whole[4])
    assert list(ckpts.glob("*")) == [] and not (tmp_path / "ref.sqlite.checkpoints").exists()


def test_a_recorded_cells_leftover_checkpoint_is_removed_and_zero_means_off(tmp_path):
    from fedcond.run import checkpoint_for
    from fedcond.sweep import checkpoint_dir

    shared_file("mnist.npz.xz")
    db = tmp_path / "l.sqlite"
    cells = plan(select("E1/mnist/K=2/rich"), "FedAvg", [0], "smoke")
    assert run_sweep(cells, str(db), str(SHARED), workers=1, progress=False, log=lambda s: None,
                     checkpoint_every=0)["ran"] == 1
    assert not checkpoint_dir(str(db)).exists()  # 0: no checkpoints at all
    c = cells[0]
    proto, fraction = PROTOCOLS["smoke"]
    left = checkpoint_for(checkpoint_dir(str(db)), c.experiment.spec(0, str(SHARED), fraction), "FedAvg", proto, 0)
    left.save(1, {}, [], 1.0)  # as if killed between writing the row and removing the file
    assert left.path.exists()
    again = run_sweep(cells, str(db), str(SHARED), workers=1, progress=False, log=lambda s: None)
    assert again["skipped"] == 1 and not left.path.exists()


def _record_elsewhere(db, cell):
    """Another sweep on the same database records `cell` (a failed row stands in for its result)."""
    con = results.connect(db)
    try:
        exp = cell.experiment
        results.save_run(con, family=exp.family, dataset=exp.dataset, scenario={}, method=cell.method, seed=cell.seed,
                         protocol={}, result=None, experiment=exp.name, protocol_name=cell.protocol_name,
                         status="failed", error="recorded by the other sweep")
    finally:
        con.close()


def test_cells_another_sweep_records_meanwhile_are_skipped_and_the_sweep_goes_on(tmp_path, monkeypatch, capsys):
    """Two sweeps on one database over overlapping cells: the second died on the UNIQUE constraint
    and never ran its other cells."""
    shared_file("mnist.npz.xz")
    from fedcond import sweep

    db = tmp_path / "shared.sqlite"
    cells = plan(select("E1/mnist/K=2/rich,E1/mnist/K=3/rich"), "Local,FedAvg", [0], "smoke")
    k2_local, k2_fedavg, k3_local, k3_fedavg = cells
    real = sweep.run_methods

    def other_sweep_meanwhile(spec, methods, *args, **kwargs):
        if spec.k == 2:  # while this sweep trains K=2, the other records K=2 FedAvg (then a clash at save) and K=3 Local
            _record_elsewhere(db, k2_fedavg)
            _record_elsewhere(db, k3_local)
        yield from real(spec, methods, *args, **kwargs)

    monkeypatch.setattr(sweep, "run_methods", other_sweep_meanwhile)
    counts = run_sweep(cells, str(db), str(SHARED), workers=1, progress=False, log=lambda s: None)
    assert counts == {"planned": 4, "skipped": 2, "ran": 2, "failed": 0}
    err = capsys.readouterr().err
    assert "E1/mnist/K=3/rich Local seed 0 [smoke]: recorded meanwhile by another process; skipped" in err
    assert "E1/mnist/K=2/rich FedAvg seed 0 [smoke]: recorded meanwhile by another process; skipped" in err
    by_cell = {r[:4]: r[4] for r in _rows(db)}
    assert by_cell == {k2_local.key: "ok", k3_fedavg.key: "ok", k2_fedavg.key: "failed", k3_local.key: "failed"}


def _descendants(pid: int) -> set[int]:
    """Every process below `pid` (Linux /proc)."""
    children: dict[int, set[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, set()).add(int(entry))
    found, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            found.add(c)
            todo.append(c)
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper has stopped computing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill_9_of_the_sweep_takes_its_pool_workers_with_it(tmp_path):
    """SIGKILL of the parent alone left its pool workers, their manager and the resource tracker
    computing (then waiting) for nobody."""
    shared_file("mnist.npz.xz")
    cmd = [sys.executable, "-m", "fedcond.cli", "sweep", "E1/mnist/K=2/rich", "--protocol", "smoke", "--methods",
           "FedAvg,Local", "--workers", "2", "--no-progress", "--db", str(tmp_path / "k.sqlite"), "--data-dir", str(SHARED)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    spawned: set[int] = set()
    children: set[int] = set()
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:  # the manager and both workers, started from spawn
            spawned = {p for p in _descendants(proc.pid) if "spawn_main" in open(f"/proc/{p}/cmdline").read()}
            if len(spawned) >= 3:
                break
            time.sleep(0.1)
        assert len(spawned) >= 3, "the sweep should have started a manager and two workers"
        children = _descendants(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.time() + 30  # the kernel's signal is immediate; the watchdog looks every second
        while time.time() < deadline and any(_alive(p) for p in children):
            time.sleep(0.2)
        assert not [p for p in children if _alive(p)]
    finally:
        for p in _descendants(proc.pid) | spawned | children:  # a failing run leaves nothing behind
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        proc.kill()


@pytest.mark.ray
@pytest.mark.parametrize("address", ["ray://127.0.0.1:PORT", "auto"])
def test_an_unreachable_ray_cluster_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch, address):
    """ray:// was a traceback after 35 s; auto (here through RAY_ADDRESS) waited minutes for a dead cluster."""
    pytest.importorskip("ray")
    from fedcond.cli import main

    port = _closed_port()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    code = main(["sweep", "E1/mnist/K=2/rich", "--protocol", "smoke", "--methods", "Local", "--no-progress",
                 "--db", str(tmp_path / "r.sqlite"), "--ray", address.replace("PORT", str(port))])
    err = capsys.readouterr().err
    assert code == 2
    (line,) = [ln for ln in err.splitlines() if not ln.startswith("sweep: ")]  # after the sweep's opening line
    assert line.startswith("fedcond: error: --ray") and re.search(f"no Ray cluster answers at [^ ]+:{port}\\b", line)


def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.ray
def test_ray_local_starts_its_own_instance_whatever_a_stale_address_file_says(tmp_path):
    """After a `ray start` whose cluster is gone, --ray local spent 9 min trying to reach it."""
    pytest.importorskip("ray")
    shared_file("mnist.npz.xz")
    import tempfile

    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths live under it
    try:
        os.makedirs(os.path.join(ray_tmp, "ray"))
        with open(os.path.join(ray_tmp, "ray", "ray_current_cluster"), "w") as f:  # what `ray start` leaves
            f.write(f"127.0.0.1:{_closed_port()}")
        env = {**os.environ, "RAY_TMPDIR": ray_tmp}
        env.pop("RAY_ADDRESS", None)
        db = tmp_path / "r.sqlite"
        out = subprocess.run([sys.executable, "-m", "fedcond.cli", "sweep", "E1/mnist/K=2/rich", "--protocol", "smoke",
                              "--methods", "Local", "--ray", "local", "--no-progress", "--db", str(db),
                              "--data-dir", str(SHARED)], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["ran"] == 1 and len(_rows(db)) == 1
    finally:
        import shutil

        shutil.rmtree(ray_tmp, ignore_errors=True)
