"""Subnormal floats are flushed while fedcond trains (engine/denormals.py): by default, in any
thread that runs a job, recorded with every row; FEDCOND_DENORMALS=keep computes with them."""

import importlib.util
import subprocess
import sys
import threading

import pytest
import torch

from fedcond.engine import denormals

SUBNORMAL = 1e-39  # below float32's smallest normal number, 1.18e-38


def flushed_here() -> bool:
    """Does this thread's CPU treat a subnormal operand as zero (DAZ)?"""
    return float(torch.tensor([SUBNORMAL]) * 2.0) == 0.0


@pytest.fixture(autouse=True)
def restore():
    yield
    denormals.apply()  # back to the default for the tests that follow


def test_flushed_by_default_and_kept_on_request(monkeypatch):
    monkeypatch.delenv(denormals.ENV, raising=False)
    if denormals.apply() != "flushed":
        pytest.skip("this CPU cannot flush subnormals")
    assert flushed_here()
    monkeypatch.setenv(denormals.ENV, "keep")
    assert denormals.apply() == "kept" and not flushed_here()


def test_a_training_job_flushes_in_whatever_thread_runs_it(monkeypatch):
    from fedcond.engine import Job, SGDConfig, train_job
    from fedcond.models import ModelSpec

    monkeypatch.delenv(denormals.ENV, raising=False)
    spec = ModelSpec((1, 28, 28), 10, 0)
    model = spec.build()
    job = Job(params=model.state_dict(), x=torch.zeros(8, 1, 28, 28, dtype=torch.uint8), y=torch.zeros(8, dtype=torch.int64),
              s=None, epochs=1, seed=(0,))
    seen = {}

    def worker():
        torch.set_flush_denormal(False)  # a thread that starts out keeping them
        seen["before"] = flushed_here()
        train_job(model, job, SGDConfig(batch_size=8))
        seen["after"] = flushed_here()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormals")
    assert seen == {"before": False, "after": True}


def test_whatever_trains_or_evaluates_sets_the_mode_in_the_thread_that_runs_it(monkeypatch):
    monkeypatch.delenv(denormals.ENV, raising=False)
    seen = {}

    @denormals.with_mode
    def trainer():
        seen["inside"] = flushed_here()

    def worker():
        torch.set_flush_denormal(False)
        trainer()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormals")
    assert seen == {"inside": True}
    from fedcond import encoder
    from fedcond.engine import local_sgd
    from fedcond.study import emnist, models

    trainers = [local_sgd.train_job, local_sgd.mean_loss, local_sgd.predict,
                encoder._train_on, emnist.train_model, models.train]
    if all(importlib.util.find_spec(name) is not None for name in ("flwr", "opacus")):  # the Flower extra
        from fedcond.flower import dp

        trainers.append(dp.train_private)
    assert all(_wrapped_by(fn, trainer.__code__) for fn in trainers)  # each wrapped by with_mode


def _wrapped_by(fn, wrapper_code) -> bool:
    """Whether a layer of fn's decorators (functools.wraps chain, torch.no_grad's included) runs wrapper_code."""
    while fn is not None:
        if getattr(fn, "__code__", None) is wrapper_code:
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def test_every_row_records_the_mode(monkeypatch):
    from fedcond import results

    monkeypatch.delenv(denormals.ENV, raising=False)
    assert results.versions()["denormals"] == "flush"
    monkeypatch.setenv(denormals.ENV, "keep")
    assert results.versions()["denormals"] == "keep"


def test_a_bad_setting_is_one_line_and_exit_2():
    import os

    env = {**os.environ, "FEDCOND_DENORMALS": "sometimes"}
    out = subprocess.run([sys.executable, "-m", "fedcond.cli", "experiments", "list", "E1/mnist/K=2/rich"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "FEDCOND_DENORMALS='sometimes': use 'flush' (the default) or 'keep'" in out.stderr
