"""benchmarks/cifar_gpu.py, the prepared GPU check (issue 42): it runs end to end (on the CPU here,
as a smoke run) and, where torch has no CUDA, says so in one line with exit 2."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedcond_testing import shared_file

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "cifar_gpu.py"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600)


def test_a_smoke_run_times_both_and_prints_the_ratio():
    shared_file("cifar10.npz.xz")
    out = _run("--device", "cpu", "--fraction", "0.02", "--epochs", "1", "--methods", "FedAvg")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("E1/cifar10/K=2/rich, fraction 0.02: cpu")
    assert any(line.startswith("| FedAvg | ") for line in lines)
    assert lines[-1].startswith("gpu/cpu: ") and lines[-1].endswith("x")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_cuda_it_says_so_in_one_line():
    out = _run()
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "no usable CUDA" in out.stderr
