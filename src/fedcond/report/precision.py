"""The report's "Reduced precision against fp32" section: the validation a `precision=bf16` protocol
option must pass before any published cell runs under it (issue 42).

A bf16 row is paired with the fp32 rows of the same experiment, method and protocol otherwise
(`paper[encoder_source=pacs32,precision=bf16]` with `paper[encoder_source=pacs32]`). The yardstick
is fp32's own seed spread: bf16 is *within* for a method when its difference (the mean over the
seeds both precisions ran of bf16 minus fp32) is no larger than the fp32 seed standard deviation of
that method where two or more fp32 seeds exist, else than the smallest such deviation measured in
the same experiment under any protocol options (the strictest yardstick on hand). A method with no
yardstick at all is "not judged". The verdict for the experiment holds only when every method
paired there is within.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from ..errors import FedcondError
from ..experiments import parse_variant, variant_name
from .tables import _table, pct, pp

REDUCED = ("bf16",)  # precisions that change the numbers (engine/precision.py); fp32 is the reference


def _split(protocol: str) -> tuple[str, str, tuple] | None:
    """(precision, preset, the other options) of a protocol name; None where it does not parse."""
    try:
        preset, options = parse_variant(protocol)
    except FedcondError:
        return None
    precision = str(options.pop("precision", "fp32"))
    return precision, preset, tuple(sorted(options.items()))


def _sd(xs: list[float]) -> float | None:
    return statistics.stdev(xs) if len(xs) >= 2 else None


def _cell(xs: list[float]) -> str:
    if not xs:
        return "-"
    sd = _sd(xs)
    return pct(statistics.mean(xs)) + (f" ± {100 * sd:.1f}" if sd is not None else "") + f" ({len(xs)})"


def precision_pairs(rows: list[dict]) -> dict:
    """{(experiment, preset, options, reduced precision): {method: ({seed: fp32 accuracy}, {seed: reduced})}}
    for every experiment and protocol that has a reduced-precision row."""
    runs: dict = defaultdict(lambda: defaultdict(dict))  # -> (method, precision) -> {seed: accuracy}
    for r in rows:
        if r.get("experiment") is None or r.get("accuracy") is None or not r.get("protocol_name"):
            continue
        split = _split(r["protocol_name"])
        if split is None:
            continue
        precision, preset, options = split
        runs[(r["experiment"], preset, options)][(r["method"], precision)][int(r["seed"])] = float(r["accuracy"])
    out: dict = {}
    for (experiment, preset, options), by in runs.items():
        for precision in REDUCED:
            methods = sorted({m for m, p in by if p == precision})
            if methods:
                out[(experiment, preset, options, precision)] = {
                    m: (by.get((m, "fp32"), {}), by[(m, precision)]) for m in methods
                }
    return out


def precision_section(rows: list[dict]) -> list[str]:
    """Markdown lines; nothing when no row ran at reduced precision."""
    pairs = precision_pairs(rows)
    if not pairs:
        return []
    lines = [
        "### Reduced precision against fp32",
        "",
        "Every experiment with rows under a reduced `precision` (a protocol option that changes the numbers), "
        "beside its fp32 rows under the same protocol otherwise. Accuracy: mean ± sd over seeds (number of "
        "seeds). Difference: reduced minus fp32, mean over the seeds both ran (their number). Yardstick: fp32's "
        "seed sd of the method, or where it has one fp32 seed the smallest fp32 seed sd of the experiment. The "
        "option may serve an experiment's family only when every method is within.",
        "",
    ]
    spreads: dict = defaultdict(list)  # experiment -> every fp32 seed sd measured there
    for (experiment, _, _, _), by in pairs.items():
        spreads[experiment] += [s for fp32, _ in by.values() if (s := _sd(list(fp32.values()))) is not None]
    for (experiment, preset, options, precision), by in sorted(pairs.items()):
        strictest = min(spreads[experiment]) if spreads[experiment] else None
        body, verdicts = [], []
        for method, (fp32, reduced) in by.items():
            own = _sd(list(fp32.values()))
            yardstick = own if own is not None else strictest
            paired = sorted(set(fp32) & set(reduced))
            if not paired:
                diff, verdict = "-", "no fp32 row of the same seed"
            else:
                d = statistics.mean(reduced[s] - fp32[s] for s in paired)
                diff = f"{pp(d)} ({len(paired)})"
                verdict = "not judged" if yardstick is None else ("within" if abs(d) <= yardstick else "outside")
            verdicts.append(verdict)
            stick = (
                "-" if yardstick is None else f"{100 * yardstick:.1f} pp" + ("" if own is not None else " (strictest)")
            )
            body.append([method, _cell(list(fp32.values())), _cell(list(reduced.values())), diff, stick, verdict])
        named = variant_name(preset, dict(options))  # the fp32 rows' protocol, as the cells name it
        n = len(verdicts)
        verdict = f"{n} method{'s' * (n != 1)} with {precision} rows, " + (
            "every one within" if all(v == "within" for v in verdicts) else f"{verdicts.count('within')} within"
        )
        lines += [f"**{experiment}**, `{named}`: {precision} against fp32, {verdict}.", ""]
        lines += _table(["method", "fp32", precision, "difference", "yardstick", "verdict"], body)
        lines += [""]
    return lines
