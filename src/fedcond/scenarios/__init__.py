"""Heterogeneity scenarios (SPEC A.6): one builder per family, all built on `partition.build`."""

from __future__ import annotations

from ..errors import FedcondError
from .families import FAMILIES
from .federation import ClientData, Federation, GroundTruth, Scenario

__all__ = ["FAMILIES", "ClientData", "Federation", "GroundTruth", "Scenario", "canonical_family", "make_scenario"]


def make_scenario(
    family: str,
    dataset: str,
    load,
    *,
    k: int | None = None,
    clients_per_cluster: int | None = None,
    clients: int | None = None,
    rotations: str | None = None,
    seed: int = 0,
    groups: str | None = None,
) -> Scenario:
    """Build any family from uniform arguments (what the command line and experiments pass).

    `k` is K for E1/E2a/E3a/E3b and C for E4b; `rotations` is C1..C4 for E2b; E4a and E4b count
    clients in total (`clients`), the others per cluster (`clients_per_cluster`, default 5). `groups` names
    the class grouping of E1 and E2a (groupings.GROUPINGS, or explicit '0,1|2,3'). Family names
    are accepted in any case.
    """
    family = canonical_family(family)
    if groups is not None and family not in ("E1", "E2a"):
        raise FedcondError(f"--groups applies to E1 and E2a only, not to {family}")
    builder = FAMILIES[family]
    if family in ("E4a", "E4b"):
        if clients_per_cluster is not None:
            raise FedcondError(f"{family} counts clients in total: use --clients, not --clients-per-cluster")
        total = clients if clients is not None else (10 if family == "E4a" else 20)
        if family == "E4a":
            return builder(dataset, load, clients=total, seed=seed)
        return builder(dataset, load, c=k or 2, clients=total, seed=seed)
    if family == "domain":
        if clients is not None or k is not None:
            raise FedcondError("the domain family takes --clients-per-cluster (clients per domain) only")
        return builder(dataset, load, clients_per_domain=clients_per_cluster or 5, seed=seed)
    if clients is not None:
        raise FedcondError(f"{family} counts clients per cluster: use --clients-per-cluster, not --clients")
    per = clients_per_cluster if clients_per_cluster is not None else 5
    if family == "E2b":
        return builder(dataset, load, rotations=rotations or "C1", clients_per_cluster=per, seed=seed)
    if family in ("E1", "E2a"):
        return builder(dataset, load, k=k or 2, clients_per_cluster=per, seed=seed, groups=groups)
    return builder(dataset, load, k=k or 2, clients_per_cluster=per, seed=seed)


def canonical_family(family: str) -> str:
    """A family name as registered (E1, E2a, ..., domain), from any case; a clear error otherwise."""
    lookup = {name.lower(): name for name in FAMILIES}
    if str(family).strip().lower() not in lookup:
        raise FedcondError(f"unknown scenario family '{family}'; choose one of {', '.join(FAMILIES)}")
    return lookup[str(family).strip().lower()]
