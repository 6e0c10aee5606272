"""What every probe does with a result: one JSON line on stdout and, with --out, the same line appended
to that file (docs/results/readings/*.jsonl), so a long probe keeps what it measured as it goes."""

from __future__ import annotations

import json
from pathlib import Path


def emit(record: dict, out: str | Path | None) -> None:
    line = json.dumps(record)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")
