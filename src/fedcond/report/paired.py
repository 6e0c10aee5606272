"""Two runs compared sample by sample on the same test samples: McNemar's exact test.

A gap between two methods on one seed is a count of test samples; where the samples are few (a
newcomer at super sparse holds 40-60 test images) a gap of some percentage points can be two images.
Rows keep which test samples they got right (`test_hits`, and `unseen_test_hits` for the newcomers;
results.pack_hits). Earlier rows kept the newcomers' accuracies only; with their test-set sizes
(`unseen_test_sizes`, probes/unseen_test_sizes.py) the gap is still a count of samples, and the count
bounds the test: however the samples pair, a difference of d samples gives p >= 2^(1 - d).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..results import unpack_hits


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar test: how likely a split of the discordant samples at least this
    uneven is if neither run is better on this test set (binomial, one half)."""
    n, k = only_a + only_b, min(only_a, only_b)
    if n == 0:
        return 1.0
    # the binomial tail in logarithms: exact integers take seconds once n reaches the thousands
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2) for i in range(k + 1)]
    top = max(logs)
    return min(1.0, 2 * math.exp(top) * sum(math.exp(v - top) for v in logs))


@dataclass(frozen=True)
class Paired:
    """Two runs on the same test samples. Sample by sample (both rows kept their hits): only_a and
    only_b, the samples only the first / only the second got right, and p exact. From counts alone
    (the sizes known, not which samples): only the difference in samples right, and p a lower bound."""

    samples: int
    right_a: int
    right_b: int
    only_a: int | None = None
    only_b: int | None = None

    @property
    def exact(self) -> bool:
        return self.only_a is not None

    @property
    def p(self) -> float:
        if self.only_a is not None and self.only_b is not None:
            return mcnemar_p(self.only_a, self.only_b)
        return mcnemar_p(abs(self.right_a - self.right_b), 0)  # every discordant sample one way: the smallest p

    def text(self) -> str:
        if self.exact:
            return f"{self.only_a} / {self.only_b} of {self.samples} right only for one, p = {self.p:.2g}"
        d = self.right_a - self.right_b
        return (
            f"{abs(d)} {'more' if d >= 0 else 'fewer'} of {self.samples} right, p >= {self.p:.2g} "
            "however they pair (which samples each got right not kept)"
        )


def _hits(extra: dict, key: str) -> list[np.ndarray] | None:
    packed = extra.get(key)
    return unpack_hits(packed) if packed else None


def _unseen_counts(extra: dict) -> tuple[list[int], list[int]] | None:
    """Per newcomer: its test samples and how many were right, from its hits or from its size and accuracy."""
    hits = _hits(extra, "unseen_test_hits")
    if hits is not None:
        return [h.size for h in hits], [int(h.sum()) for h in hits]
    sizes, accs = extra.get("unseen_test_sizes"), extra.get("unseen_per_client")
    if not sizes or not accs or len(sizes) != len(accs):
        return None
    return list(sizes), [round(a * n) for a, n in zip(accs, sizes)]


def paired(a: dict, b: dict, unseen: bool) -> Paired | None:
    """Runs a and b (database rows) on the same test samples, seen (`test_hits`) or unseen; None where
    either row lacks what the comparison needs or their test sets differ."""
    ea, eb = a.get("extra") or {}, b.get("extra") or {}
    key = "unseen_test_hits" if unseen else "test_hits"
    ha, hb = _hits(ea, key), _hits(eb, key)
    if ha is not None and hb is not None:
        if [h.size for h in ha] != [h.size for h in hb]:
            return None
        x, y = np.concatenate(ha), np.concatenate(hb)
        return Paired(int(x.size), int(x.sum()), int(y.sum()), int((x & ~y).sum()), int((~x & y).sum()))
    if not unseen:
        return None
    ca, cb = _unseen_counts(ea), _unseen_counts(eb)
    if ca is None or cb is None or ca[0] != cb[0]:
        return None
    return Paired(sum(ca[0]), sum(ca[1]), sum(cb[1]))
