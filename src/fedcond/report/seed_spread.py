"""Could one more seed of ours land on the published value? A Student t prediction interval.

The paper reports single runs. A cell of ours with n seeds says where our method's runs fall; a
published value is one run. The interval a new run of ours would fall in with probability 95% is
mean +- t(0.975, n - 1) * sd * sqrt(1 + 1/n) (runs assumed normal and independent). The range of
the seeds run is a much narrower yardstick: a fourth seed falls outside the range of three with
probability 1/2 (2/(n + 1) in general), so "outside the range" is weak evidence of a difference.
With three seeds the interval is wide (about 5 sd either side): it says how little three seeds
can tell, not that the gap is explained.

The report prints it beside each cell more than 3 pp off, as a measurement; it does not relabel a
cell (the labels are explanations.csv's, with their own evidence).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from scipy.stats import t as student_t

MIN_SEEDS = 3  # two seeds give t(0.975, 1) = 12.7: an interval too wide to print
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    n: int

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high


def prediction_interval(values: tuple[float, ...] | list[float], level: float = LEVEL) -> Interval | None:
    """Where one more run falls with probability `level`, from the runs `values`; None below MIN_SEEDS."""
    n = len(values)
    if n < MIN_SEEDS:
        return None
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half = float(student_t.ppf(0.5 + level / 2, n - 1)) * sd * math.sqrt(1 + 1 / n)
    return Interval(mean - half, mean + half, n)


def verdict(values: tuple[float, ...] | list[float], published: float) -> str:
    """'inside 74.1-87.3 (n=3)', 'outside 74.1-87.3 (n=6)', or '-' (fewer than MIN_SEEDS seeds); percent,
    the bounds shown clipped to 0-100 (an accuracy cannot pass them; inside or outside is decided unclipped)."""
    iv = prediction_interval(values)
    if iv is None:
        return "-"
    where = "inside" if iv.holds(published) else "outside"
    low, high = max(0.0, 100 * iv.low), min(100.0, 100 * iv.high)
    return f"{where} {low:.1f}-{high:.1f} (n={iv.n})"
