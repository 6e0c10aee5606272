"""The reading probes under probes/ (issue 40) run end to end on a small federation and write what they
say they write."""

import json
import subprocess
import sys
from pathlib import Path

from fedcond_testing import FakeResult, script_module, shared_file

PROBES = Path(__file__).resolve().parents[1] / "probes"


def test_ifca_first_rounds_traces_each_round_and_appends_a_json_line(tmp_path):
    shared_file("mnist.npz.xz")
    out_file = tmp_path / "trace.jsonl"
    args = ["--experiments", "E1/mnist/K=2/rich", "--protocols", "smoke[epochs=2];smoke[epochs=2,inputs=raw]",
            "--rounds", "2", "--out", str(out_file)]
    run = subprocess.run([sys.executable, str(PROBES / "ifca_first_rounds.py"), *args], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    traces = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [t["protocol"] for t in traces] == ["smoke[epochs=2]", "smoke[epochs=2,inputs=raw]"]
    for t in traces:
        assert [r["round"] for r in t["rounds"]] == [0, 1]  # stopped after the rounds asked, not the protocol's
        assert all(sum(r["sizes"]) == 10 and len(r["sizes"]) == 2 and -1 <= r["ari"] <= 1 for r in t["rounds"])
    assert run.stdout.strip().splitlines() == out_file.read_text().strip().splitlines()


def _probe_module(name: str):
    return script_module(PROBES / f"{name}.py")


def _official_batch(pixels, labels) -> bytes:
    """The byte layout of an official CIFAR-10 python batch (pickle protocol 2, written by Python 2):
    the labels list in BININT1 items, appended in chunks of 1,000, then the pixel block as one BINSTRING."""
    out = b"\x80\x02}q\x01(U\x0bbatch_labelq\x02U\x0ftraining batch 1q\x03U\x06labelsq\x04]q\x05"
    for lo in range(0, len(labels), 1000):
        out += b"(" + b"".join(b"K" + bytes([v]) for v in labels[lo : lo + 1000]) + b"e"
    return out + b"U\x04dataq\x06cnumpy.core.multiarray\n_reconstruct\nq\x07" + b"T" + (30_720_000).to_bytes(4, "little") + pixels


def test_jpeg_cost_reads_a_cut_official_batch_without_unpickling_and_matches_its_images(tmp_path):
    import numpy as np

    jc = _probe_module("jpeg_cost")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, 10_000).tolist()
    planar = rng.integers(0, 256, (40, 3, 32, 32), dtype=np.uint8)  # the first 40 images' rows (R, G, B planes)
    path = tmp_path / "data_batch_1"
    path.write_bytes(_official_batch(planar.tobytes(), labels) + b"\x00" * 100)  # cut mid-image, as the prefixes are
    x, y = jc.read_prefix(path)
    assert x.shape == (40, 32, 32, 3) and (x == planar.transpose(0, 2, 3, 1)).all()
    assert y.tolist() == labels[:40]
    # the "JPEG copy": the same images shuffled among others of the same labels, with a little noise
    extra = rng.integers(0, 256, (60, 32, 32, 3), dtype=np.uint8)
    pool_y = np.concatenate([y, rng.integers(0, 10, 60)])
    order = rng.permutation(100)
    noisy = np.clip(x.astype(int) + rng.integers(-3, 4, x.shape), 0, 255).astype(np.uint8)
    pool_x, pool_y = np.concatenate([noisy, extra])[order], pool_y[order]
    idx, psnr, ratio = jc.match(x, y, pool_x, pool_y)
    assert (order[idx] == np.arange(40)).all() and psnr.min() > 35 and ratio > 2
    path.write_bytes(b"not a batch")
    try:
        jc.read_prefix(path)
    except SystemExit as e:
        assert "not an official CIFAR-10 python batch" in str(e)
    else:
        raise AssertionError("a file that is not a batch was read")


def test_label_agreement_bound_by_hand_and_from_the_scenarios_permutations():
    mod = _probe_module("label_agreement")
    # one fixed point of three classes: (1 + f/C)/2 = (1 + 1/3)/2
    assert abs(mod.agreement_bound([(0, 1, 2), (0, 2, 1)]) - 2 / 3) < 1e-12
    assert mod.agreement_bound([(0, 1, 2), (1, 2, 0), (2, 0, 1)]) == 1 / 3  # no class agrees: 1/K
    from fedcond.scenarios.families import label_permutations

    perms = label_permutations(10, 2, 0)
    fixed = sum(a == b for a, b in zip(*perms))
    assert mod.agreement_bound(perms) == (1 + fixed / 10) / 2
    run = subprocess.run([sys.executable, str(PROBES / "label_agreement.py"), "--k", "2,4", "--seeds", "0,1"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert [line["k"] for line in lines] == [2, 4] and set(lines[1]["bound_by_seed"]) == {"0", "1"}


def test_e3b_draws_the_same_permutations_as_before_the_helper():
    """label_permutations is the scenario's own draw: seed 0's K=2 second permutation, as E3b rows recorded
    it (the explanations' f = 1 for seed 0)."""
    from fedcond.scenarios.families import label_permutations

    perms = label_permutations(10, 2, 0)
    assert perms[0] == tuple(range(10)) and sum(a == b for a, b in zip(*perms)) == 1
    assert [sum(a == b for a, b in zip(*label_permutations(10, 2, s))) for s in (1, 2)] == [1, 0]


def test_ifca_readings_fit_uses_settled_per_round_runs_for_frozen_ones_and_counts_the_fits(tmp_path):
    """A per-round run whose last reassignment came by round 4 stands for its frozen run; one that came later,
    or that does not say, needs a frozen row of its own. Fits by hand on two seeds of one published cell."""
    from fedcond import results
    from fedcond.report.data import published_for, published_tables

    exp = "E3b/fmnist/K=3/rich"
    pub = published_for(published_tables(), exp, "IFCA")

    def save(db, method, seed, acc, extra):
        con = results.connect(db)
        results.save_run(con, family="E3b", dataset="fmnist", scenario={"family": "E3b"}, method=method, seed=seed,
                         protocol={"epochs": 20}, result=FakeResult(acc, extra=extra), experiment=exp, protocol_name="paper")
        con.close()

    paper, probes = tmp_path / "paper.sqlite", tmp_path / "probes.sqlite"
    save(paper, "IFCA", 0, pub + 0.10, {"last_reassignment": 2})  # settled: frozen is the same run
    save(paper, "IFCA", 1, pub + 0.20, {"last_reassignment": 9})  # a late change: its frozen row counts
    save(paper, "IFCA", 2, pub + 0.30, {})  # an old row: no frozen row, so no pair
    save(probes, "IFCA(refine_rounds=5)", 1, pub, {})
    run = subprocess.run([sys.executable, str(PROBES / "ifca_readings_fit.py"), "--paper", str(paper),
                          "--probes", str(probes)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out = run.stdout.splitlines()
    assert out[0] == "2 (cell, seed) pairs on 1 cell"
    assert out[1].startswith(f"{exp} seeds [0, 1]: per round {pub + .1:.3f} {pub + .2:.3f} | frozen {pub + .1:.3f} {pub:.3f}")
    assert out[2] == ("per round: every seed 15.0 pp; seed 0 (1 cell) 10.0 pp; cell means 15.0 pp (0 of 1 within 3 pp); "
                      "published inside the seeds' range on 0 of 1 cells with 2+ seeds")
    assert out[3] == ("frozen: every seed 5.0 pp; seed 0 (1 cell) 10.0 pp; cell means 5.0 pp (0 of 1 within 3 pp); "
                      "published inside the seeds' range on 1 of 1 cells with 2+ seeds")


def test_federated_ceiling_keeps_one_true_cluster_and_appends_its_score(tmp_path):
    shared_file("mnist.npz.xz")
    from fedcond import experiments as X

    fc = _probe_module("federated_ceiling")
    scenario = X.select("E3b/mnist/K=2/rich")[0].spec(0, None, X.protocol("smoke")[1]).build()
    sub = fc.cluster_scenario(scenario, 1)
    members = [c for c, k in zip(scenario.federation.clients, scenario.truth.cluster) if k == 1]
    assert sub.federation.clients == tuple(members) and len(members) == 5  # the same objects, in order
    assert sub.truth.cluster.tolist() == [0] * 5 and sub.truth.cluster_names == (scenario.truth.cluster_names[1],)
    out_file = tmp_path / "ceiling.jsonl"
    args = ["--experiment", "E3b/mnist/K=2/rich", "--method", "FedAvg", "--protocol", "smoke", "--clusters", "1",
            "--out", str(out_file)]
    run = subprocess.run([sys.executable, str(PROBES / "federated_ceiling.py"), *args], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    (line,) = [json.loads(t) for t in out_file.read_text().splitlines()]
    assert line["cluster"] == scenario.truth.cluster_names[1] and line["clients"] == 5 and 0 <= line["accuracy"] <= 1


def test_round_trace_prints_each_round_then_the_result(tmp_path):
    shared_file("mnist.npz.xz")
    out_file = tmp_path / "trace.jsonl"
    args = ["--experiment", "E1/mnist/K=2/rich", "--method", "FedAvg(server_opt=momentum)", "--protocol", "smoke",
            "--rounds", "2", "--out", str(out_file)]
    run = subprocess.run([sys.executable, str(PROBES / "round_trace.py"), *args], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(t) for t in out_file.read_text().splitlines()]
    assert [t.get("round") for t in lines] == [0, 1, None] and lines[-1]["rounds"] == 2
    assert lines[0]["step_norm"] is None and lines[1]["step_norm"] > 0 and lines[1]["weight_norm"] > 0
    assert run.stdout.strip().splitlines() == out_file.read_text().strip().splitlines()
