"""Help texts are generated from the registries: what a registry gains shows in --help."""

import dataclasses

import pytest

from fedcond import stats
from fedcond.algorithms import ALGORITHMS, FedAvg
from fedcond.cli import main
from fedcond.scenarios import FAMILIES


def help_text(capsys, *argv) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines


def test_run_help_lists_every_statistic_family_and_dataset(capsys, monkeypatch):
    monkeypatch.setitem(stats.STATISTICS, "new_stat", dataclasses.replace(stats.STATISTICS["random"], description="a new one"))
    monkeypatch.setitem(FAMILIES, "E9", FAMILIES["E1"])
    monkeypatch.setattr("fedcond.data.registry.DATASETS", ("digits", "new_data"))
    text = help_text(capsys, "run")
    assert "new_stat: a new one" in text and "E9 (label shift)" in text and "new_data" in text
    assert all(name in text for name in stats.STATISTICS) and all(f"{name} (" in text for name in FAMILIES)
    assert "E9 (label shift)" in help_text(capsys, "scenario", "describe")


@pytest.mark.parametrize("command", ["simulate", "run-config"])
def test_flower_help_lists_the_methods_it_accepts(capsys, monkeypatch, command):
    from fedcond.commands.flower import flower_methods

    monkeypatch.setitem(ALGORITHMS, "FedNew", FedAvg)
    text = help_text(capsys, "flower", command)
    assert "FedNew" in flower_methods() and f"a federated method: {', '.join(flower_methods())};" in text
    assert "Local" not in flower_methods() and "Oracle" not in flower_methods() and "FedProc" not in flower_methods()
    assert "new_stat" not in text and all(name in text for name in stats.STATISTICS)
