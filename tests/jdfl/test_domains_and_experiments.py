"""The domain federation (one domain per client), JDFL's registered experiments, and their sweep."""

import sqlite3

import numpy as np
import pytest
import torch

import fedcond.data as fd
from fedcond import experiments
from fedcond.algorithms import make_algorithm
from fedcond.data.types import DomainData
from fedcond.errors import FedcondError
from fedcond.experiments import EXPERIMENTS, select
from fedcond.jdfl import diagnostics
from fedcond.protocol import PAPER
from fedcond.scenarios import make_scenario
from fedcond.sweep import plan, run_sweep


def planted_domains(per_class=10, classes=3, size=64, seed=0) -> DomainData:
    """4 domains (a strong colour cast each) x `classes` classes (a bright square at a class's place)."""
    rng = np.random.default_rng(seed)
    casts = np.array([[90, 0, 0], [0, 90, 0], [0, 0, 90], [60, 60, 0]])
    xs, ys, ds = [], [], []
    for d in range(4):
        for c in range(classes):
            x = rng.integers(0, 80, (per_class, size, size, 3)).astype(np.int64) + casts[d]
            q = size // 4
            x[:, q * c : q * c + q, q : 2 * q] = 250
            xs.append(np.clip(x, 0, 255).astype(np.uint8))
            ys += [c] * per_class
            ds += [d] * per_class
    return DomainData("planted", np.concatenate(xs), np.array(ys, dtype=np.int64), np.array(ds, dtype=np.int64),
                      tuple(f"class{c}" for c in range(classes)), ("red", "green", "blue", "olive"))


def test_domain_split_is_disjoint_complete_stratified_and_seeded():
    data = planted_domains(per_class=20)
    tag = np.arange(len(data.y))
    x = data.x.copy()
    x[:, 0, 0, 0], x[:, 0, 0, 1] = tag % 256, tag // 256  # trace every image
    data = DomainData(data.name, x, data.y, data.domain, data.classes, data.domains)
    sc = make_scenario("domain", "planted", lambda n: data, clients_per_cluster=3, seed=1)
    fed, truth = sc.federation, sc.truth
    assert fed.num_clients == 12 and truth.cluster.tolist() == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    assert truth.cluster_names == data.domains and fed.num_classes == 3 and fed.input_shape == (3, 64, 64)

    def ids(t):
        return (t[:, 0, 0, 0].long() + 256 * t[:, 1, 0, 0].long()).tolist()

    seen_train, seen_test = [], []
    for i, c in enumerate(fed.clients):
        for split, seen in ((c.x_train, seen_train), (c.x_test, seen_test)):
            got = ids(split)
            assert set(data.domain[got]) == {truth.cluster[i]}  # one domain per client
            seen += got
        assert torch.equal(c.y_train, torch.as_tensor(data.y[ids(c.x_train)]))
    assert len(seen_train) + len(seen_test) == len(data.y) and set(seen_train) | set(seen_test) == set(range(len(data.y)))
    assert not set(seen_train) & set(seen_test)
    held = np.zeros((4, 3), int)
    for t in seen_test:
        held[data.domain[t], data.y[t]] += 1
    assert (held == 4).all()  # 20% of each domain's class
    again = make_scenario("domain", "planted", lambda n: data, clients_per_cluster=3, seed=1)
    other = make_scenario("domain", "planted", lambda n: data, clients_per_cluster=3, seed=2)
    assert torch.equal(again.federation.clients[4].x_train, fed.clients[4].x_train)
    assert not torch.equal(other.federation.clients[4].x_train, fed.clients[4].x_train)
    with pytest.raises(FedcondError, match="too few"):
        make_scenario("domain", "planted", lambda n: data, clients_per_cluster=13)
    with pytest.raises(FedcondError, match="no domains"):
        make_scenario("domain", "digits", lambda n: fd.load("digits"))


def test_registered_jdfl_experiments():
    main = EXPERIMENTS["JDFL/pacs/main"]
    assert len(main.methods) == 15 and main.family == "domain" and main.dataset == "pacs"
    for name in main.methods + EXPERIMENTS["JDFL/pacs/m_sweep"].methods + EXPERIMENTS["JDFL/office/ablation"].methods:
        make_algorithm(name)  # every cell names a valid method
    assert {make_algorithm(m).slots for m in EXPERIMENTS["JDFL/pacs/m_sweep"].methods} == set(range(2, 8))
    disc = EXPERIMENTS["JDFL/pacs/discovery"]
    assert disc.kind == "discovery" and len(disc.methods) == 45
    assert {diagnostics.parse(m) for m in disc.methods} == {(e, b, lay) for e in range(1, 6) for b in (16, 32, 64) for lay in "ABC"}
    assert [e.name for e in select("JDFL/office/*")] == ["JDFL/office/main", "JDFL/office/ablation", "JDFL/office/replicate", "JDFL/office/random_per_sample", "JDFL/office/m_sweep"]
    for name in EXPERIMENTS["JDFL/pacs/random_per_sample"].methods:
        assert make_algorithm(name).draw == "sample" and make_algorithm(name).scheme == "random"


def test_jdfl_experiments_run_under_their_own_preset_unless_a_sweep_names_another():
    from fedcond.sweep import plan

    jdfl, _ = experiments.PROTOCOLS["jdfl"]
    assert (jdfl.lr, jdfl.momentum, jdfl.eval_every) == (0.01, 0.9, 1)  # the text's lr; momentum and R: docs/choices.md
    assert all(e.preset == "jdfl" for name, e in EXPERIMENTS.items() if name.startswith("JDFL/"))
    assert all(e.preset == "paper" for name, e in EXPERIMENTS.items() if name.startswith("E"))
    mixed = [EXPERIMENTS["JDFL/pacs/main"], EXPERIMENTS["E1/mnist/K=2/rich"]]
    assert {c.experiment.name[:4]: c.protocol_name for c in plan(mixed, "FedAvg", [0], None)} == {"JDFL": "jdfl", "E1/m": "paper"}
    assert {c.protocol_name for c in plan(mixed, "FedAvg", [0], "short")} == {"short"}
    assert {c.protocol_name for c in plan(mixed, "FedAvg", [0], None, {"epochs": 3})} == {"jdfl[epochs=3]", "paper[epochs=3]"}


@pytest.fixture
def tiny_protocol(monkeypatch):
    monkeypatch.setitem(experiments.PROTOCOLS, "tiny", (PAPER.replace(epochs=1, batch_size=16), 1.0))
    return "tiny"


def test_sweep_runs_jdfl_cells_on_office_caltech_folders(tmp_path, tiny_protocol):
    """Office-Caltech-10 in its public folder layout (generated here): the registered JDFL
    experiment runs through the sweep, recording accuracy, per-domain accuracy and the pseudo-domains."""
    from PIL import Image

    data = planted_domains(per_class=10, size=40)
    for i, (x, y, d) in enumerate(zip(data.x, data.y, data.domain)):
        folder = tmp_path / "office_caltech" / ("amazon", "caltech", "dslr", "webcam")[d] / ("back_pack", "bike", "mug")[y]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(x).save(folder / f"{i}.png")
    exp = EXPERIMENTS["JDFL/office/main"]
    cells = plan([exp], "FedAvg,FedAvg+jdfl-graded(M=4,e0=1)", [0], tiny_protocol)
    db = tmp_path / "r.sqlite"
    counts = run_sweep(cells, str(db), data_dir=str(tmp_path), workers=1, progress=False, log=lambda s: None)
    assert counts["ran"] == 2 and counts["failed"] == 0
    con = sqlite3.connect(db)
    rows = dict(con.execute("SELECT method, extra FROM runs").fetchall())
    import json

    jd = json.loads(rows["FedAvg+jdfl-graded(M=4,e0=1)"])
    assert jd["pseudo_domains"] == 4 and 0.0 <= jd["ari"] <= 1.0 + 1e-9
    assert set(jd["cluster_accuracy"]) == {"amazon", "caltech", "dslr", "webcam"}
    assert run_sweep(cells, str(db), data_dir=str(tmp_path), workers=1, progress=False, log=lambda s: None)["skipped"] == 2


def test_discovery_cells_through_the_sweep(tmp_path, tiny_protocol, monkeypatch):
    data = planted_domains(per_class=12, size=64)
    monkeypatch.setattr(fd, "load", lambda name, data_dir=None, **kw: data)
    exp = EXPERIMENTS["JDFL/pacs/discovery"]
    cells = [c for c in plan([exp], None, [0], tiny_protocol) if c.method.startswith(("discovery(e0=1,batch=16", "discovery(e0=2,batch=16"))]
    assert len(cells) == 6
    db = tmp_path / "d.sqlite"
    counts = run_sweep(cells, str(db), workers=1, progress=False, log=lambda s: None)
    assert counts["ran"] == 6
    import json

    con = sqlite3.connect(db)
    rows = con.execute("SELECT method, accuracy, extra FROM runs ORDER BY method").fetchall()
    assert all(acc is None for _, acc, _ in rows)  # nothing is trained to completion: no accuracy
    extras = {m: json.loads(e) for m, _, e in rows}
    assert all(e["true_domains"] == 4 and 1 <= e["elbow"] <= 8 and -1.0 <= e["ari"] <= 1.0 for e in extras.values())
    assert extras["discovery(e0=2,batch=16,layers=C)"]["parameters"] > extras["discovery(e0=2,batch=16,layers=A)"]["parameters"]
    assert extras["discovery(e0=1,batch=16,layers=A)"]["inertia"] != extras["discovery(e0=2,batch=16,layers=A)"]["inertia"]
