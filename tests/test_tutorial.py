"""docs/tutorial.md, executed: every command block marked `<!-- tutorial-commands -->` runs from a
fresh folder, as a reader would run it, and what the page says about the results is checked."""

import os
import re
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from fedcond_testing import SHARED, shared_file

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "tutorial.md"


def tutorial_commands() -> list[str]:
    text = PAGE.read_text()
    blocks = re.findall(r"<!-- tutorial-commands -->\s*```bash\n(.*?)```", text, flags=re.S)
    commands = []
    for block in blocks:
        joined = block.replace("\\\n", " ")
        commands += [line.strip() for line in joined.splitlines() if line.strip()]
    return commands


def test_the_page_has_commands_and_every_one_is_fedcond():
    commands = tutorial_commands()
    assert len(commands) >= 5
    assert all(c.startswith("fedcond ") for c in commands)


@pytest.mark.slow
def test_the_tutorial_runs_as_written(tmp_path):
    shared_file("mnist.npz.xz")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               FEDCOND_DATA=str(SHARED), XDG_DATA_HOME=str(tmp_path / "xdg"))
    for command in tutorial_commands():
        argv = [sys.executable, "-m", "fedcond.cli", *shlex.split(command)[1:]]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{command}\n{proc.stderr[-2000:]}"
    assert (tmp_path / "labels.png").stat().st_size > 0
    con = sqlite3.connect(tmp_path / "compare.sqlite")
    per_client = dict(con.execute("SELECT method, per_client FROM runs").fetchall())
    assert per_client["FedAvgM"] == per_client["FedAvg(server_opt=momentum)"]  # "the same numbers bit for bit"
    methods = {m for (m,) in sqlite3.connect(tmp_path / "tutorial.sqlite").execute(
        "SELECT method FROM runs WHERE experiment = 'class_pairs/mnist/clients=20'")}
    assert methods == {"FedAvg", "FedAvgM", "Oracle"}
    report = (tmp_path / "report" / "report.md").read_text()
    section = report.split("(class_pairs)")[1].split("\n## ")[0]
    assert "FedAvgM" in section and "Oracle" in section and "labels_class_pairs_mnist_clients20.png" in section
