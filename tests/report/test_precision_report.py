"""The report's "Reduced precision against fp32" section (issue 42's validation): bf16 rows beside the
fp32 rows of the same protocol otherwise, judged against fp32's own seed spread."""

from __future__ import annotations

from fedcond.report.precision import precision_pairs, precision_section

CELL = "E1/cifar10/K=2/rich"


def row(method: str, seed: int, accuracy: float, protocol: str = "paper") -> dict:
    return {"experiment": CELL, "method": method, "seed": seed, "accuracy": accuracy, "protocol_name": protocol}


def verdicts(lines: list[str]) -> dict[str, str]:
    """method -> its verdict, from the section's table rows."""
    out = {}
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0] not in ("method",):
            out[cells[0]] = cells[-1]
    return out


def test_no_reduced_precision_row_no_section():
    assert precision_section([row("FedAvg", 0, 0.6), row("FedAvg", 1, 0.55)]) == []


def test_a_method_is_judged_by_its_own_fp32_seed_spread_on_the_seeds_both_ran():
    rows = [row("FedAvg", s, a) for s, a in ((0, 0.60), (1, 0.70), (2, 0.65))]  # sd 5 pp
    rows += [row("FedAvg", s, a, "paper[precision=bf16]") for s, a in ((0, 0.58), (1, 0.69), (2, 0.62))]
    lines = precision_section(rows)
    assert verdicts(lines) == {"FedAvg": "within"}
    assert any("-2.0 pp (3)" in line for line in lines)  # mean of the paired differences
    assert any("every one within" in line for line in lines)


def test_a_method_with_one_fp32_seed_takes_the_strictest_spread_measured_beside_it():
    rows = [row("FedAvg", s, a) for s, a in ((0, 0.60), (1, 0.70), (2, 0.65))]  # sd 5 pp
    rows += [row("Oracle", s, a) for s, a in ((0, 0.836), (1, 0.840), (2, 0.832))]  # sd 0.4 pp
    rows += [row("DAC", 0, 0.821)]
    rows += [row(m, 0, a, "paper[precision=bf16]") for m, a in (("FedAvg", 0.63), ("Oracle", 0.835), ("DAC", 0.80))]
    lines = precision_section(rows)
    # DAC: -2.1 pp against Oracle's 0.4 pp (the strictest), although FedAvg spreads 5 pp
    assert verdicts(lines) == {"DAC": "outside", "FedAvg": "within", "Oracle": "within"}
    assert any("(strictest)" in line for line in lines)
    assert any("3 methods with bf16 rows, 2 within" in line for line in lines)


def test_no_spread_measured_means_not_judged_and_a_missing_seed_is_said():
    rows = [row("Oracle", 0, 0.836), row("Oracle", 0, 0.83, "paper[precision=bf16]"),
            row("IFCA", 1, 0.82, "paper[precision=bf16]"), row("IFCA", 0, 0.821)]
    assert verdicts(precision_section(rows)) == {"IFCA": "no fp32 row of the same seed", "Oracle": "not judged"}


def test_other_options_pair_only_with_the_same_options():
    rows = [row("Conditional", 0, 0.824, "paper[encoder_source=pacs32]"),
            row("Conditional", 0, 0.5),  # another encoder: not its reference
            row("Conditional", 0, 0.82, "paper[encoder_source=pacs32,precision=bf16]")]
    pairs = precision_pairs(rows)
    assert list(pairs) == [(CELL, "paper", (("encoder_source", "pacs32"),), "bf16")]
    assert pairs[list(pairs)[0]]["Conditional"] == ({0: 0.824}, {0: 0.82})
    lines = precision_section(rows)
    assert any("`paper[encoder_source=pacs32]`" in line for line in lines)
    assert verdicts(lines) == {"Conditional": "not judged"}  # no fp32 seed spread anywhere in the experiment


def test_the_strictest_yardstick_comes_from_any_protocol_options_of_the_experiment():
    rows = [row("Oracle", s, a) for s, a in ((0, 0.836), (1, 0.840), (2, 0.832))]  # sd 0.4 pp under `paper`
    rows += [row("Oracle", 0, 0.835, "paper[precision=bf16]")]
    rows += [row("Conditional", 0, 0.824, "paper[encoder_source=pacs32]"),
             row("Conditional", 0, 0.810, "paper[encoder_source=pacs32,precision=bf16]")]
    assert verdicts(precision_section(rows)) == {"Oracle": "within", "Conditional": "outside"}
