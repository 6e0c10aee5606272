"""Which code this is: the package version and the git commit, for `fedcond --version` and for the
rows of the results database (results.git_revision).

The commit comes from, in order: a stamp written when the wheel or sdist was built (`_revision.txt`
beside this file, by setup.py; an installed copy never asks git, whose answer would be the commit of
whatever checkout the environment happens to sit in), else `git rev-parse HEAD` in this file's
folder (a checkout or an editable install), else "unknown"."""

from __future__ import annotations

import subprocess
from pathlib import Path

from . import __version__

STAMP = Path(__file__).with_name("_revision.txt")


def _from_git() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def read_revision() -> tuple[str, str]:
    """(commit, where it was read: "build stamp" | "git checkout" | "unknown")."""
    if STAMP.is_file():
        stamped = STAMP.read_text(encoding="utf-8").strip()
        if stamped:
            return stamped, "build stamp"
    found = _from_git()
    return (found, "git checkout") if found else ("unknown", "unknown")


def version_text(revision: tuple[str, str]) -> str:
    """`fedcond 0.1.0 (git 9dda9694836a, from the git checkout)`; a build from a checkout with edits
    says so (`9dda9694836a+dirty`)."""
    commit, source = revision
    if source == "unknown":
        return f"fedcond {__version__} (git revision unknown)"
    head, plus, local = commit.partition("+")
    return f"fedcond {__version__} (git {head[:12]}{plus}{local}, from the {source})"
