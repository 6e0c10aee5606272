"""Heterogeneity scenarios (SPEC A.6): one builder per family, all built on `partition.build`."""

from __future__ import annotations

from ..errors import FedcondError
from .families import FAMILIES
from .federation import ClientData, Federation, GroundTruth, Scenario

__all__ = ["FAMILIES", "ClientData", "Federation", "GroundTruth", "Scenario", "make_scenario"]


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
) -> Scenario:
    """Build any family from uniform arguments (what the command line and experiments pass).

    `k` is K for E1/E2a/E3a/E3b and C for E4b; `rotations` is C1..C4 for E2b; E4a and E4b count
    clients in total (`clients`), the others per cluster (`clients_per_cluster`, default 5).
    """
    if family not in FAMILIES:
        raise FedcondError(f"unknown scenario family '{family}'; choose one of {', '.join(FAMILIES)}")
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
    return builder(dataset, load, k=k or 2, clients_per_cluster=per, seed=seed)
