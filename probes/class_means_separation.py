"""How well each client's class-means statistic names its true cluster, at several widths (no training).

For one experiment (held-out clients as in the table's protocol) and the seeds given: the statistic at
m projections a class (stats.class_means), z-scored over the training clients (a newcomer with their
parameters, as holdout.py does); a logistic regression from it to the true cluster, 10-fold
cross-validated on the training clients (their lowest probability of their own cluster) and fitted on
all of them for the newcomers. Issue 45, stop 67: the evidence behind stats.class_means_projections.

Usage: FEDCOND_DATA=... python probes/class_means_separation.py E3a/fmnist/K=2/super_sparse [--seeds 0,1,2] [--m 3,8,15]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_predict

from fedcond import stats as S
from fedcond.client_stats import _feature_map_when_used
from fedcond.experiments import EXPERIMENTS, protocol, scenario_options
from fedcond.holdout import hold_out


def separation(experiment: str, protocol_name: str, seed: int, m: int) -> dict:
    proto, fraction = protocol(protocol_name)
    spec = EXPERIMENTS[experiment].spec(seed, None, fraction, **scenario_options(protocol_name))
    train, unseen = hold_out(spec.build(), proto.holdout_clients)
    fed, y = train.federation, train.truth.cluster
    phi = _feature_map_when_used(fed, proto, None)
    stat = lambda clients: np.stack([S.class_means(phi(c.x_train), c.y_train, fed.num_classes, m) for c in clients])  # noqa: E731
    raw_train, raw_new = stat(fed.clients), stat(unseen.clients)
    z_train, z_new = S.normalise(raw_train), S.normalise_with(raw_new, raw_train)
    cv = cross_val_predict(LogisticRegression(max_iter=5000), z_train, y, cv=10, method="predict_proba")
    fit = LogisticRegression(max_iter=5000).fit(z_train, y)
    return {
        "width": raw_train.shape[1],
        "cv_accuracy": float((cv.argmax(1) == y).mean()),
        "lowest_own": float(cv[np.arange(len(y)), y].min()),
        "newcomers_own": [float(fit.predict_proba(z[None])[0, k]) for z, k in zip(z_new, unseen.cluster)],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment")
    ap.add_argument("--protocol", default="paper[statistic=class_means,holdout_clients=1]")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--m", default="3,8,15")
    args = ap.parse_args()
    for seed in (int(s) for s in args.seeds.split(",")):
        for m in (int(v) for v in args.m.split(",")):
            r = separation(args.experiment, args.protocol, seed, m)
            print(f"{args.experiment} seed {seed} m={m} ({r['width']} numbers): training clients CV accuracy "
                  f"{r['cv_accuracy']:.3f}, lowest P(own) {r['lowest_own']:.3f}; newcomers P(own) "
                  + ", ".join(f"{p:.3f}" for p in r["newcomers_own"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
