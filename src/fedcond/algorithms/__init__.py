"""Every algorithm, by name. One file per algorithm; this registry is the only lookup."""

from __future__ import annotations

from ..errors import FedcondError
from .base import Algorithm, Context, State, hyperparameters
from .dac import DAC, DACLoss
from .ditto import Ditto
from .fedavg import ConditionalFedAvg, FedAvg
from .feddc import FedDC
from .feddyn import FedDyn
from .fedproc import FedProc
from .fedprox import FedProx
from .gossip import Gossip
from .ifca import IFCA
from .pooled import Conditional, Local, Oracle
from .scaffold import Scaffold

ALGORITHMS: dict[str, type] = {
    # the paper's eight (SPEC A.5)
    "Local": Local,
    "FedAvg": FedAvg,
    "Gossip": Gossip,
    "Ditto": Ditto,
    "IFCA": IFCA,
    "DAC": DAC,
    "Oracle": Oracle,
    "Conditional": Conditional,
    # variants
    "Conditional-FedAvg": ConditionalFedAvg,
    "DAC-loss": DACLoss,
    # federated optimisers (also JDFL's bases)
    "FedProx": FedProx,
    "SCAFFOLD": Scaffold,
    "FedDyn": FedDyn,
    "FedDC": FedDC,
    "FedProc": FedProc,
}

# The eight methods of the paper, in its table order; those not yet implemented are skipped by `all`.
PAPER_METHODS = ("Local", "FedAvg", "Gossip", "Ditto", "IFCA", "DAC", "Oracle", "Conditional")
# What `fedcond run` trains when no method is named: the paper's eight and the deployable Conditional.
DEFAULT_METHODS = PAPER_METHODS + ("Conditional-FedAvg",)


def make_algorithm(name: str, num_clusters: int | None = None, **hyper) -> Algorithm:
    """The algorithm registered as `name` (any case) with `hyper` set. Algorithms told the true
    number of clusters (IFCA, DAC: ClassVar num_clusters_field) get `num_clusters` unless `hyper` sets it."""
    lookup = {k.lower(): k for k in ALGORITHMS}
    if name.lower() not in lookup:
        raise FedcondError(f"unknown method '{name}'; choose from {', '.join(ALGORITHMS)}")
    cls = ALGORITHMS[lookup[name.lower()]]
    field = getattr(cls, "num_clusters_field", None)
    if field and num_clusters is not None:
        hyper.setdefault(field, num_clusters)
    try:
        return cls(**hyper)
    except TypeError as e:
        raise FedcondError(f"bad hyper-parameters for {name}: {e}") from None


def resolve_methods(spec: str | None) -> list[str]:
    """None -> DEFAULT_METHODS; 'all' -> the paper's eight; 'registry' -> every registered algorithm;
    else a comma list, validated and canonically cased."""
    if spec is None:
        return list(DEFAULT_METHODS)
    if spec.strip().lower() == "registry":
        return list(ALGORITHMS)
    if spec.strip().lower() == "all":
        return [m for m in PAPER_METHODS if m in ALGORITHMS]
    lookup = {k.lower(): k for k in ALGORITHMS}
    names = [m.strip() for m in spec.split(",") if m.strip()]
    bad = [m for m in names if m.lower() not in lookup]
    if bad or not names:
        raise FedcondError(f"unknown method(s) {', '.join(bad) or '(none given)'}; choose from {', '.join(ALGORITHMS)} or all")
    return [lookup[m.lower()] for m in names]


__all__ = ["ALGORITHMS", "DEFAULT_METHODS", "PAPER_METHODS", "Algorithm", "Context", "State", "hyperparameters", "make_algorithm", "resolve_methods"]
