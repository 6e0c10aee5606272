"""The protocol option `precision`: fp32 by default, bf16 autocast only when asked for, named in the
cell, recorded in the row, and refused (one line, exit 2) where the CPU would emulate it."""

import json
import sqlite3

import pytest
import torch

from fedcond.cli import main
from fedcond.engine import Job, LoopEngine, SGDConfig, precision
from fedcond.errors import FedcondError
from fedcond.experiments import protocol, variant_name
from fedcond.models import ModelSpec
from fedcond.protocol import PAPER


def _job(spec, n=40):
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    x = torch.randint(0, 256, (n, *spec.input_shape), dtype=torch.uint8, generator=gen)
    y = torch.randint(0, spec.num_classes, (n,), generator=gen)
    return Job(spec.build().state_dict(), x, y, None, 1, (0,))


@pytest.fixture
def bf16_allowed(monkeypatch):
    monkeypatch.setenv(precision.FORCE_ENV, "1")  # this CPU may lack bf16: run it anyway (tiny model)


def test_precision_is_a_protocol_option_named_in_the_cell():
    assert PAPER.precision == "fp32"
    assert variant_name("paper", {"precision": "fp32"}) == "paper"  # the default changes nothing
    assert variant_name("paper", {"precision": "bf16", "encoder_source": "pacs32"}) == (
        "paper[encoder_source=pacs32,precision=bf16]"
    )
    assert protocol("paper[precision=bf16]")[0].precision == "bf16"
    with pytest.raises(FedcondError, match="unknown precision 'fp16'"):
        PAPER.replace(precision="fp16")


def test_bf16_trains_under_autocast_with_fp32_master_weights(bf16_allowed):
    spec = ModelSpec((1, 28, 28), 10)
    job = _job(spec)
    fp32 = LoopEngine(SGDConfig(batch_size=16)).train(spec, [job])[0]
    bf16 = [LoopEngine(SGDConfig(batch_size=16, precision="bf16")).train(spec, [job])[0] for _ in range(2)]
    assert all(v.dtype == torch.float32 for v in bf16[0].params.values() if v.is_floating_point())
    assert any(not torch.equal(fp32.params[k], bf16[0].params[k]) for k in fp32.params)  # autocast did run
    assert all(torch.equal(bf16[0].params[k], bf16[1].params[k]) for k in fp32.params)  # and is deterministic
    assert abs(fp32.mean_loss - bf16[0].mean_loss) < 0.1  # the same training, to bf16 rounding
    again = LoopEngine(SGDConfig(batch_size=16, precision="fp32")).train(spec, [job])[0]
    assert all(torch.equal(fp32.params[k], again.params[k]) for k in fp32.params)  # fp32 is the default


def test_a_cpu_without_bf16_refuses_it_unless_forced(monkeypatch, capsys):
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    monkeypatch.delenv(precision.FORCE_ENV, raising=False)
    assert precision.check_supported("fp32") == "fp32"
    with pytest.raises(FedcondError, match="neither avx512_bf16 nor AMX"):
        LoopEngine(SGDConfig(precision="bf16"))
    for argv in (["run", "--methods", "FedAvg", "--epochs", "1", "--k", "2", "--precision", "bf16", "--no-progress"],
                 ["sweep", "E1/mnist/K=2/rich", "--methods", "FedAvg", "--precision", "bf16", "--no-progress"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "neither avx512_bf16 nor AMX" in err and "\n" not in err and precision.FORCE_ENV in err
    monkeypatch.setenv(precision.FORCE_ENV, "1")
    assert precision.check_supported("bf16") == "bf16"
    with pytest.raises(FedcondError, match="CPU engines only"):
        precision.check_supported("bf16", "cuda")


def test_torch_capped_below_bf16_counts_as_without_it(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert not precision.cpu_has_bf16()


def test_bf16_run_is_recorded_in_the_row_and_a_sweep_names_its_cells(bf16_allowed, capsys, tmp_path):
    db = tmp_path / "r.sqlite"
    argv = ["run", "--dataset", "digits", "--methods", "FedAvg", "--epochs", "1", "--k", "2", "--clients-per-cluster",
            "1", "--precision", "bf16", "--workers", "1", "--no-progress", "--json", "--db", str(db)]
    assert main(argv) == 0, capsys.readouterr().err
    (proto,) = sqlite3.connect(db).execute("SELECT protocol FROM runs").fetchone()
    assert json.loads(proto)["precision"] == "bf16"
    capsys.readouterr()
    assert main(["sweep", "E1/cifar10/K=2/rich", "--methods", "FedAvg", "--precision", "bf16", "--dry-run",
                 "--db", str(db)]) == 0
    assert "[paper[precision=bf16]]" in capsys.readouterr().out
