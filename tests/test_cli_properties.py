"""Property: whatever options a user gives, the command line ends in a result (exit 0), or one
line on stderr and exit 2; `run` may also end with methods recorded as failed (exit 1, the
results on stdout and a one-line summary last). Never a traceback.

Hypothesis draws each option as absent, a cheap valid value, a boundary or out-of-range number,
or junk text. Derandomised, so CI sees the same examples every time: `run` on the embedded digits
with at most 2 epochs on 2 clients per cluster (SWEEP_EXAMPLES + RUN_EXAMPLES examples in all,
seconds each at most), `sweep --dry-run` (plans and reads the database only).
"""

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedcond.cli import SEED_MAX, main

RUN_EXAMPLES = 15
SWEEP_EXAMPLES = 40

TMP = Path(tempfile.mkdtemp(prefix="fedcond-props-"))
(TMP / "a_file").write_text("")
EMPTY_DIR = TMP / "empty"
EMPTY_DIR.mkdir()

JUNK = st.one_of(
    st.sampled_from(["", " ", "x", "-1", "1.5", "nan", "inf", "1e999", "0x10", "None", ",", "|", "../..", "--json"]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6),  # argv holds no NUL
)


def _mostly(valid, *invalid):
    """`valid` three times in four, so that most examples get past the parser and run."""
    return st.one_of(valid, valid, valid, *invalid) if len(invalid) == 1 else st.one_of(valid, valid, valid, valid, *invalid)


def _int(low: int, high: int, cheap_high: int):
    """A whole number: cheap and valid, else just outside [low, high], huge, or junk."""
    return _mostly(st.integers(low, cheap_high).map(str),
                   st.sampled_from([low - 1, high + 1, 10**24, -(10**24)]).map(str), JUNK)


def _text(*valid: str):
    return _mostly(st.sampled_from(valid), JUNK)


def _float(*valid: str):
    return _mostly(st.sampled_from(valid), st.sampled_from(["0", "-1", "1", "1e300", "nan", "inf", "-inf"]), JUNK)


def _db():
    return st.sampled_from([str(TMP / "r.sqlite"), str(TMP / "r.sqlite"), "", str(TMP), str(TMP / "a_file" / "r.sqlite")])


PROTOCOL_OPTIONS = {
    "--epochs": _int(1, 10_000, 2),
    "--local-epochs": _int(1, 10_000, 2),
    "--lr": _float("0.01", "0.1", "1e12"),  # 1e12 diverges: a failed method, not a traceback
    "--momentum": _float("0", "0.9", "0.999"),
    "--conditioning": _text("concat", "film"),
    "--stats-normalisation": _text("zscore", "log", "none"),
    "--statistic": _text("eigenvalues", "class_means", "random"),
    "--eval-every": _int(0, 10_000, 2),
    "--holdout-clients": _int(0, 100_000, 2),
    "--precision": _text("fp32", "bf16"),
}
RUN_OPTIONS = {
    **PROTOCOL_OPTIONS,
    "--scenario": _text("E1", "e1", "E2b", "E3a", "E3b", "E4a", "E4b", "domain"),
    "--dataset": _text("digits", "digits", "mnist"),
    "--k": _int(1, 1_000, 3),
    "--rotations": _text("C1", "C4", "C9"),
    "--clients-per-cluster": _int(1, 100_000, 2),
    "--clients": _int(1, 100_000, 8),
    "--groups": _text("semantic", "blocks", "0,1,2,3,4|5,6,7,8,9", "0,1|1,2"),
    "--seed": _int(0, SEED_MAX, 3),
    "--data-dir": st.sampled_from([str(EMPTY_DIR), str(TMP / "a_file"), ""]),
    "--experiment": _text("E1/mnist/K=2/rich", "E1/mnist/*"),  # its data is not in --data-dir: an error, no training
    "--methods": _text("Local", "FedAvg", "Local,FedAvg", "IFCA", "Conditional", "FedProx(mu=abc)", "Nope"),
    "--workers": _int(1, 1_024, 1),
    "--device": _text("cpu", "cuda", "nosuch"),
    "--db": _db(),
}
SWEEP_OPTIONS = {
    **PROTOCOL_OPTIONS,
    "--epochs": _int(1, 10_000, 10_000),  # nothing trains: any valid number
    "--protocol": _text("smoke", "paper", "jdfl", "short"),
    "--seeds": st.one_of(st.lists(st.integers(-2, SEED_MAX + 1), min_size=1, max_size=3).map(lambda s: ",".join(map(str, s))),
                         JUNK),
    "--methods": _text("Local", "all", "FedAvg,Conditional", "Nope"),
    "--groups": _text("semantic", "blocks", "0,1,2,3,4|5,6,7,8,9"),
    "--checkpoint-every": _float("0", "300"),
    "--ray": _text("local", "auto"),
    "--workers": _int(1, 1_024, 4),
    "--data-dir": st.sampled_from([str(EMPTY_DIR), ""]),
    "--db": _db(),
}
SMALL_RUN = {"--epochs": "1", "--clients-per-cluster": "2", "--methods": "Local", "--workers": "1", "--k": "2",
             "--db": str(TMP / "r.sqlite")}


def _options(table: dict, defaults: dict | None = None):
    """Draw a subset of the options in `table`, each with a drawn value; `defaults` fill the ones not drawn."""
    names = sorted(table)

    @st.composite
    def draw(draw_):
        chosen = draw_(st.lists(st.sampled_from(names), unique=True, max_size=4))
        values = {name: draw_(table[name]) for name in chosen}
        argv = []
        for name, value in {**(defaults or {}), **values}.items():
            argv += [name, value] if not value.startswith("-") else [f"{name}={value}"]  # argparse reads "-1" as an option
        return argv

    return draw()


def _outcome(capsys, argv: list[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def _assert_clean(code: int, out: str, err: str, may_fail_methods: bool = False) -> None:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    if code == 0:
        assert out.strip(), "exit 0 without a result"
    elif code == 2:
        assert len(lines) == 1 and "error:" in lines[0], err
    else:
        assert may_fail_methods and code == 1, (code, err)
        assert lines[-1].startswith("fedcond: ") and "failed" in lines[-1] and out.strip()


SETTINGS = dict(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                                       HealthCheck.too_slow])


@pytest.fixture(autouse=True)
def _in_tmp(monkeypatch):
    monkeypatch.chdir(TMP)  # a junk --db or --out is written here, never into the checkout
    monkeypatch.setenv("FEDCOND_DATA", str(EMPTY_DIR))
    monkeypatch.setenv("XDG_DATA_HOME", str(TMP))  # and the default database is never the user's


@settings(max_examples=RUN_EXAMPLES, **SETTINGS)
@given(argv=_options(RUN_OPTIONS, SMALL_RUN), json_out=st.booleans())
def test_run_ends_in_a_result_or_one_line(capsys, argv, json_out):
    code, out, err = _outcome(capsys, ["run", "--no-progress", *argv] + (["--json"] if json_out else []))
    _assert_clean(code, out, err, may_fail_methods=True)


@settings(max_examples=SWEEP_EXAMPLES, **SETTINGS)
@given(pattern=_text("E1/mnist/K=2/rich", "E2b/mnist/C1/rich,E1/fmnist/K=2/rich", "E1/*", "MCDC/*", "JDFL/*"),
       argv=_options(SWEEP_OPTIONS, {"--db": str(TMP / "sweep.sqlite")}))
def test_sweep_dry_run_ends_in_a_plan_or_one_line(capsys, pattern, argv):
    code, out, err = _outcome(capsys, ["sweep", pattern, "--dry-run", "--no-progress", *argv])
    _assert_clean(code, out, err)
