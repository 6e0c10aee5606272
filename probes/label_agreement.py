"""The best one model can score on E3b (label permutation), by the permutations a seed draws (issue 40).

Every E3b cluster labels the same images by its own permutation of the classes, so a single model
(FedAvg, or any method that ends with one model) can at best give each class the label most clusters
agree on. Its accuracy is then at most

    bound = (1 / C) * sum_c  max_l |{k : perm_k(c) = l}| / K,

times how well it tells the classes apart (a cluster model's accuracy). For K = 2 this is (1 + f/C)/2,
f the second permutation's fixed points. The permutations depend only on the seed and K
(scenarios/families.label_permutations), so the bound is the same for every dataset and sparsity.

Usage: python probes/label_agreement.py [--k 2,3,4,5] [--seeds 0,1,2] [--classes 10]
Prints one line per K: the bound for each seed, as JSON.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from fedcond.scenarios.families import label_permutations


def agreement_bound(perms: list[tuple[int, ...]]) -> float:
    """Mean over classes of the share of clusters that give the class its most common label."""
    classes, k = len(perms[0]), len(perms)
    return sum(Counter(p[c] for p in perms).most_common(1)[0][1] for c in range(classes)) / (k * classes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", default="2,3,4,5")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--classes", type=int, default=10)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    for k in (int(v) for v in args.k.split(",")):
        bounds = {s: round(agreement_bound(label_permutations(args.classes, k, s)), 4) for s in seeds}
        print(json.dumps({"k": k, "bound_by_seed": bounds}))


if __name__ == "__main__":
    main()
