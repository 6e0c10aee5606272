#!/usr/bin/env bash
# Build fedcond's wheel and sdist (python -m build), install the wheel in a fresh virtual environment
# and run a tiny training from it, outside the source tree: the wheel must carry everything a run
# needs (the C++ kernel sources, the published numbers, py.typed) and say which commit it was built from.
#
#   scripts/check_wheel.sh [PYTHON]     PYTHON: the interpreter whose packages (torch, numpy, ...) the
#                                       test environment reuses (default: python3 on PATH)
#
# The fresh venv sees PYTHON's site-packages through a .pth file (python -m venv --system-site-packages
# would see the *base* interpreter's, which lacks torch when PYTHON is itself a venv); the wheel is
# installed with --no-deps over them, so nothing is downloaded but the build's setuptools.
set -euo pipefail
PYTHON=${1:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

echo "== build (sdist, then the wheel from the sdist)"
"$PYTHON" -m build --outdir "$WORK/dist" "$ROOT" >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; exit 1; }
rm -rf "$ROOT/build" "$ROOT/src/fedcond.egg-info"  # the build's scratch in the source tree
ls -l "$WORK/dist"
WHEEL=$(ls "$WORK"/dist/fedcond-*.whl)
SDIST=$(ls "$WORK"/dist/fedcond-*.tar.gz)

echo "== contents"
"$PYTHON" - "$WHEEL" "$SDIST" <<'PY'
import sys, tarfile, zipfile
wheel, sdist = sys.argv[1], sys.argv[2]
w = set(zipfile.ZipFile(wheel).namelist())
s = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n}
need_w = ["fedcond/models/cpu_kernels/kernels.cpp", "fedcond/resources/paper_results.csv", "fedcond/py.typed",
          "fedcond/_revision.txt"]
need_s = ["src/" + n for n in need_w] + ["LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "setup.py"]
missing = [n for n in need_w if n not in w] + [n for n in need_s if n not in s]
lic = [n for n in w if n.endswith("/LICENSE")]
print(f"wheel: {len(w)} files, license {lic}; sdist: {len(s)} entries; stamped:",
      zipfile.ZipFile(wheel).read("fedcond/_revision.txt").decode().strip())
if missing or not lic:
    sys.exit(f"missing: {missing or 'the LICENSE in the wheel'}")
PY

echo "== install in a fresh venv"
"$PYTHON" -m venv "$WORK/venv"
SITE=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
VSITE=$("$WORK/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
echo "$SITE" >"$VSITE/_reuse_parent_packages.pth"  # a path only: the parent's own .pth files (an editable fedcond) stay unread
"$WORK/venv/bin/python" -m pip install --quiet --no-deps --no-index "$WHEEL"

echo "== run from the installed wheel (outside the checkout)"
cd "$WORK"
"$WORK/venv/bin/python" -c 'import fedcond, sys; p = fedcond.__file__; print("imported from", p); sys.exit(0 if p.startswith(sys.argv[1]) else "not the installed wheel")' "$WORK/venv"
"$WORK/venv/bin/fedcond" --version
XDG_DATA_HOME="$WORK/xdg" "$WORK/venv/bin/fedcond" run --methods FedAvg,Conditional-FedAvg --epochs 1 --k 2 \
    --workers 1 --no-progress --db "$WORK/smoke.sqlite"
"$WORK/venv/bin/fedcond" results list --db "$WORK/smoke.sqlite"
"$WORK/venv/bin/fedcond" results show 1 --db "$WORK/smoke.sqlite" | grep -E "^(git_rev|versions):"  # rows name the stamped commit
echo "== the C++ kernels compiled from the wheel's sources (a fresh cache)"
XDG_CACHE_HOME="$WORK/cache" "$WORK/venv/bin/fedcond" doctor | grep -iE "kernel|isa|compil" || true
echo "== ok"
