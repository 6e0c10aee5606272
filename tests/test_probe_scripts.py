"""The reading probes under probes/ (issue 40) run end to end on a small federation and write what they
say they write."""

import json
import subprocess
import sys
from pathlib import Path

from fedcond_testing import shared_file

PROBES = Path(__file__).resolve().parents[1] / "probes"


def test_ifca_first_rounds_traces_each_round_and_appends_a_json_line(tmp_path):
    shared_file("mnist.npz.xz")
    out_file = tmp_path / "trace.jsonl"
    args = ["--experiments", "E1/mnist/K=2/rich", "--protocols", "smoke[epochs=2];smoke[epochs=2,inputs=raw]",
            "--rounds", "2", "--out", str(out_file)]
    run = subprocess.run([sys.executable, str(PROBES / "ifca_first_rounds.py"), *args], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    traces = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [t["protocol"] for t in traces] == ["smoke[epochs=2]", "smoke[epochs=2,inputs=raw]"]
    for t in traces:
        assert [r["round"] for r in t["rounds"]] == [0, 1]  # stopped after the rounds asked, not the protocol's
        assert all(sum(r["sizes"]) == 10 and len(r["sizes"]) == 2 and -1 <= r["ari"] <= 1 for r in t["rounds"])
    assert run.stdout.strip().splitlines() == out_file.read_text().strip().splitlines()
