"""fedcond --version and the revision rows record: a build stamp wins over git; git in a checkout."""

import subprocess
from pathlib import Path

import pytest

import fedcond
from fedcond import version
from fedcond.cli import main


def test_stamp_wins_over_git(tmp_path, monkeypatch):
    stamp = tmp_path / "_revision.txt"
    stamp.write_text("abc123def4567890abc123def4567890abc123de+dirty\n")
    monkeypatch.setattr(version, "STAMP", stamp)
    rev = version.read_revision()
    assert rev == ("abc123def4567890abc123def4567890abc123de+dirty", "build stamp")
    assert version.version_text(rev) == f"fedcond {fedcond.__version__} (git abc123def456+dirty, from the build stamp)"


def test_no_stamp_no_git_is_unknown(tmp_path, monkeypatch):
    monkeypatch.setattr(version, "STAMP", tmp_path / "none.txt")
    monkeypatch.setattr(version, "_from_git", lambda: None)
    assert version.read_revision() == ("unknown", "unknown")
    assert version.version_text(version.read_revision()).endswith("(git revision unknown)")


def test_version_option_names_the_checkouts_commit(capsys):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(fedcond.__file__).parent, capture_output=True, text=True)
    if head.returncode != 0 or version.STAMP.is_file():
        pytest.skip("not run from a git checkout")
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"fedcond {fedcond.__version__} (git {head.stdout[:12]}, from the git checkout)"
