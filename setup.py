"""Build hooks only (the metadata is in pyproject.toml): stamp the git commit into the package as
fedcond/_revision.txt, so an installed wheel says which commit it is (fedcond --version, the
git_rev of every results row) without asking git. The sdist carries the stamp, so a wheel built
from it (python -m build builds the wheel from the sdist, outside the checkout) keeps it."""

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
STAMP = Path("src", "fedcond", "_revision.txt")


def _revision() -> str | None:
    """HEAD of the checkout this is built from, "+dirty" if tracked files differ from it; else the
    sdist's stamp; else None."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10)
        if head.returncode == 0 and (HERE / ".git").exists():
            dirty = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE, capture_output=True, text=True
            )
            return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    stamped = HERE / STAMP
    return stamped.read_text(encoding="utf-8").strip() if stamped.is_file() else None


class BuildPyWithRevision(build_py):
    def run(self):
        super().run()
        revision = _revision()
        if revision and not self.editable_mode:  # an editable install reads git itself
            Path(self.build_lib, "fedcond", "_revision.txt").write_text(revision + "\n", encoding="utf-8")


class SdistWithRevision(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        revision = _revision()
        if revision:
            target = Path(base_dir, STAMP)
            target.unlink(missing_ok=True)  # a hard link to the source tree's copy, if one was listed
            target.write_text(revision + "\n", encoding="utf-8")


setup(cmdclass={"build_py": BuildPyWithRevision, "sdist": SdistWithRevision})
