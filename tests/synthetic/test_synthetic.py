"""The earlier study (SPEC Part B): generator, eigenvector statistic, the six models, EMNIST end to end."""

import dataclasses
import warnings
import zipfile

import numpy as np
import pytest
import torch

from fedcond import results
from fedcond.study import (EXPERIMENTS, TrainConfig, client_statistics, eigvec_statistic, fit_and_score, fix_sign,
                         generate, leading_eigenvectors, record, run_synthetic)
from fedcond.study.statistic import cluster_ari

torch.set_num_threads(1)


def test_same_seed_same_data():
    a, b = generate("linreg", 3, clients_per_cluster=5, seed=7), generate("linreg", 3, clients_per_cluster=5, seed=7)
    for f in ("x_train", "y_train", "x_test", "y_test", "cluster", "directions", "weights"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    c = generate("linreg", 3, clients_per_cluster=5, seed=8)
    assert not np.allclose(a.x_train, c.x_train) and not np.allclose(a.weights, c.weights)
    assert a.x_train.shape == (15, 50, 10) and a.x_test.shape == (15, 50, 10) and a.y_train.shape == (15, 50)
    logit = generate("logreg", 3, clients_per_cluster=5, seed=7)
    np.testing.assert_array_equal(logit.x_train, a.x_train)  # same inputs, labels instead of targets
    assert set(np.unique(logit.y_train)) == {0.0, 1.0}


def test_generator_ground_truth():
    fed = generate("linreg", 8)
    u = fed.directions
    np.testing.assert_allclose(u @ u.T, np.eye(8), atol=1e-12)  # orthonormal cluster directions
    top = np.sort(np.abs(u), axis=1)
    assert (top[:, -1] - top[:, -2] >= 0.25).all()  # the sign margin
    np.testing.assert_array_equal(fix_sign(u), u)
    # each cluster's covariance has its direction as leading eigenvector, eigenvalue ~16, the rest ~1
    x = fed.x_train[fed.cluster == 2].reshape(-1, 10)
    vals, vecs = np.linalg.eigh(np.cov(x.T))
    assert abs(vecs[:, -1] @ u[2]) > 0.999 and 14 < vals[-1] < 18 and vals[-2] < 1.3


@pytest.mark.parametrize("clusters", [3, 8])
def test_clusters_recoverable_from_the_statistic(clusters):
    fed = generate("linreg", clusters, seed=1)
    mu = client_statistics(fed.x_train)  # [N, 10], training splits only
    assert cluster_ari(mu, fed.cluster) == 1.0
    # nearest true direction, *with* sign: every client's sign-fixed eigenvector points like its cluster's
    cos = mu @ fed.directions.T  # [N, K]
    assert (cos.argmax(axis=1) == fed.cluster).all()
    assert cos[np.arange(len(mu)), fed.cluster].min() > 0.9


def test_sign_convention_is_invariant():
    rng = np.random.default_rng(0)
    v = rng.standard_normal((5, 7))
    fixed = fix_sign(v)
    np.testing.assert_array_equal(fix_sign(-v), fixed)
    assert (fixed[np.arange(5), np.abs(fixed).argmax(axis=1)] > 0).all()
    assert (fix_sign(np.zeros((1, 3))) == 0).all()
    x = generate("linreg", 3, clients_per_cluster=1, seed=3).x_train[1]  # [50, 10]
    ref = eigvec_statistic(x, n_c=3)
    np.testing.assert_allclose(eigvec_statistic(-x, n_c=3), ref, atol=1e-12)  # data negated
    np.testing.assert_allclose(eigvec_statistic(x[rng.permutation(len(x))], n_c=3), ref, atol=1e-12)  # reordered
    # another solver (eigh of the covariance, whose signs are its own) gives the same statistic
    vals, vecs = np.linalg.eigh(np.cov(x.T))
    np.testing.assert_allclose(fix_sign(vecs[:, ::-1][:, :3].T).reshape(-1), ref, atol=1e-8)


def test_missing_eigenvectors_are_zero_padded():
    x = np.random.default_rng(0).standard_normal((3, 6))  # 3 samples: only 2 directions exist
    with pytest.warns(UserWarning, match="only 2 of 4"):
        out = leading_eigenvectors(x, 4)
    assert out.shape == (4, 6) and (out[2:] == 0).all() and np.allclose(np.linalg.norm(out[:2], axis=1), 1)


def _oracle_lstsq_rmse(fed):
    """The cluster oracle solved exactly (least squares per cluster), test RMSE over all test samples."""
    err = []
    for k in range(fed.num_clusters):
        m = fed.cluster == k
        w = np.linalg.lstsq(fed.x_train[m].reshape(-1, fed.features), fed.y_train[m].reshape(-1), rcond=None)[0]
        err.append((fed.x_test[m] @ w - fed.y_test[m]) ** 2)
    return float(np.sqrt(np.mean(err)))


@pytest.mark.parametrize("clusters", [3, 8])
def test_cluster_oracle_rmse_is_about_0_1(clusters):
    fed = generate("linreg", clusters)
    assert abs(_oracle_lstsq_rmse(fed) - 0.1) < 0.005
    if clusters == 3:  # and the trained oracle (Adam, the study's trainer) gets there too
        res = fit_and_score(fed, ("cluster",), config=TrainConfig(steps=600, lr=0.02))["cluster"]
        assert res.metric == "rmse" and abs(res.value - 0.1) < 0.01 and abs(res.pooled - 0.1) < 0.01


def test_batched_reference_models_equal_separate_training():
    """The K cluster models train as one batched model; full-batch, that equals K separate runs."""
    from fedcond.study import models as M

    fed = generate("logreg", 3, clients_per_cluster=4)
    cfg = TrainConfig(steps=150, lr=0.05, batch_per_client=10_000)  # full batch: no sampling to replay
    t = lambda a: torch.as_tensor(a, dtype=M.DTYPE)  # noqa: E731
    mu, cluster = torch.zeros(fed.num_clients, 10, dtype=M.DTYPE), torch.as_tensor(fed.cluster)
    batched = M.build("cluster", M.Shapes(12, 3, 10, 10), cfg, 0)
    M.train(batched, "logreg", t(fed.x_train), t(fed.y_train), mu, cluster, cfg, 0)
    for k in range(3):
        m = fed.cluster == k
        one = M.build("global", M.Shapes(4, 1, 10, 10), cfg, 0)
        M.train(one, "logreg", t(fed.x_train[m]), t(fed.y_train[m]), mu[m], torch.zeros(4, dtype=torch.int64), cfg, 0)
        torch.testing.assert_close(batched.weight[k], one.weight[0], rtol=1e-5, atol=1e-6)  # Adam eps: 3x gradient scale


def _planted(fed, mu, seed=1):
    """The federation with y = x^T W mu_i exactly (no noise), for a random W [D, D]."""
    w = np.random.default_rng(seed).standard_normal((10, 10)) / np.sqrt(10)
    target = lambda x: np.einsum("Nnd,dp,Np->Nn", x, w, mu)  # noqa: E731
    return dataclasses.replace(fed, y_train=target(fed.x_train), y_test=target(fed.x_test))


def test_every_architecture_fits_a_planted_conditional_linear_model():
    fed = generate("linreg", 3, clients_per_cluster=10)
    cfg = TrainConfig(steps=1000, lr=0.02)
    # planted statistic: mu_i = u_k, the cluster's true direction
    exact = fed.directions[fed.cluster]  # [N, D]
    planted = _planted(fed, exact)
    res = fit_and_score(planted, ("global", "conditional_linear", "ensemble", "mlp"), config=cfg, mu=exact)
    rel = {k: r.value / float(planted.y_test.std()) for k, r in res.items()}  # RMSE relative to the target's spread
    assert rel["conditional_linear"] < 1e-3 and rel["ensemble"] < 1e-3 and rel["mlp"] < 0.05, rel
    assert rel["global"] > 0.3, rel
    # the clients' estimated statistics (continuous): the conditional linear model still represents the
    # target exactly; its fit is slower (mu varies little within a cluster: small curvature), so a looser bound
    mu = client_statistics(fed.x_train)
    planted = _planted(fed, mu)
    res = fit_and_score(planted, ("conditional_linear",), config=cfg, mu=mu)
    assert res["conditional_linear"].value / float(planted.y_test.std()) < 0.05


def test_run_synthetic_logreg_table():
    res = run_synthetic("logreg", 3, clients_per_cluster=10, config=TrainConfig(steps=200))
    assert list(res) == ["global", "cluster", "client", "conditional_linear", "ensemble", "mlp", "bayes"]
    for r in res.values():
        assert r.metric == "accuracy" and 0.0 <= r.value <= 1.0 and len(r.per_client) == 30
    assert res["bayes"].value > 0.9 and res["cluster"].value > res["global"].value + 0.05
    assert res["conditional_linear"].value > res["global"].value + 0.05


def test_registry_runs_and_records(tmp_path):
    assert {"MCDC/linreg/3clusters", "MCDC/linreg/8clusters", "MCDC/logreg/3clusters", "MCDC/logreg/8clusters",
            "MCDC/emnist/references", "MCDC/emnist/nc=1", "MCDC/emnist/nc=8"} <= set(EXPERIMENTS)
    exp = EXPERIMENTS["MCDC/linreg/3clusters"]
    res = exp(seed=0, protocol="smoke", methods=("cluster", "bayes"))
    assert set(res) == {"cluster", "bayes"} and res["cluster"].value < 0.5  # smoke: 200 steps, not converged
    con = results.connect(tmp_path / "r.sqlite")
    record(con, exp, res, seed=0, protocol="smoke")
    rows = con.execute("SELECT experiment, method, accuracy, extra FROM runs ORDER BY method").fetchall()
    assert [r[:2] for r in rows] == [("MCDC/linreg/3clusters", "bayes"), ("MCDC/linreg/3clusters", "cluster")]
    assert '"metric": "rmse"' in rows[1][3]


# ------------------------------------------------------------------------------------------ EMNIST

BYCLASS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _emnist_byclass_zip(path, per_class_train=8, per_class_test=4, seed=0):
    """A tiny official-layout gzip.zip holding the byclass split only (images stored transposed)."""
    from fedcond.data.formats.idx import write_idx

    rng = np.random.default_rng(seed)
    scratch = path.with_suffix(".tmp.gz")
    with zipfile.ZipFile(path, "w") as zf:
        for split, per in (("train", per_class_train), ("test", per_class_test)):
            y = rng.permutation(np.repeat(np.arange(62), per)).astype(np.uint8)
            x = rng.integers(0, 256, (len(y), 28, 28), dtype=np.uint8)
            x[:, 10:18, 4 + (y % 20)] = 255  # a label-dependent stroke, so there is something to learn
            for part, arr in (("images-idx3", np.ascontiguousarray(x.transpose(0, 2, 1))), ("labels-idx1", y)):
                write_idx(scratch, arr, compress=True)
                zf.writestr(f"gzip/emnist-byclass-{split}-{part}-ubyte.gz", scratch.read_bytes())
        zf.writestr("gzip/emnist-byclass-mapping.txt", "".join(f"{i} {ord(c)}\n" for i, c in enumerate(BYCLASS)))
    scratch.unlink()


def test_emnist_study_end_to_end(tmp_path):
    from fedcond.data.emnist import convert_emnist_zip
    from fedcond.study.emnist import CONFUSABLE_GROUPS, EmnistConfig, format_results, run_emnist

    _emnist_byclass_zip(tmp_path / "gzip.zip")
    convert_emnist_zip(tmp_path / "gzip.zip", tmp_path, ("byclass",), preset=1)
    cfg = EmnistConfig(clients_per_cluster=2, samples_per_client=40, test_samples_per_client=15, epochs=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_emnist(tmp_path, nc=(1, 2), config=cfg)
    assert list(res) == ["global", "cluster", "client", "conditional/nc=1", "conditional/nc=2"]
    for key, r in res.items():
        assert r.metric == "accuracy" and 0.0 <= r.value <= 1.0 and len(r.per_client) == 6
        assert r.extra["split"] == "byclass" and r.extra["train_per_client"] == 40 and r.extra["test_per_client"] == 15
        conf = r.extra["confusable"]
        assert list(conf) == list(CONFUSABLE_GROUPS)
        for group, g in conf.items():
            assert set(g["per_char"]) == set(group.split("/"))
            assert g["samples"] == sum(c["samples"] for c in g["per_char"].values())
            assert (g["accuracy"] is None) == (g["samples"] == 0)
        assert sum(g["samples"] for g in conf.values()) > 0
        assert set(r.extra["per_cluster"]) == {"digits", "uppercase", "lowercase"}
    assert res["conditional/nc=2"].hyperparameters["stat_dim"] == 2 * 784
    assert "o/O/0" in format_results(res)
    # the registry entry for one n_c runs the conditioned CNN alone
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = EXPERIMENTS["MCDC/emnist/nc=1"](data_dir=tmp_path, protocol="smoke", samples_per_client=40,
                                             test_samples_per_client=15)
    assert list(one) == ["conditional"] and one["conditional"].hyperparameters["n_c"] == 1


def test_emnist_study_trains_with_the_engines_sgd_configuration():
    from fedcond.engine import SGDConfig
    from fedcond.study.emnist import EmnistConfig

    assert EmnistConfig().sgd == SGDConfig()
    assert EmnistConfig(lr=0.1, batch_size=8).sgd == SGDConfig(lr=0.1, batch_size=8)
