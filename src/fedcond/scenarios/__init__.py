"""Heterogeneity scenarios (SPEC A.6): one builder per family, all built on `partition.build`."""

from __future__ import annotations

from .families import FAMILIES
from .federation import ClientData, Federation, GroundTruth, Scenario
from .spec import ScenarioSpec, canonical_family, make_scenario

__all__ = [
    "FAMILIES",
    "ClientData",
    "Federation",
    "GroundTruth",
    "Scenario",
    "ScenarioSpec",
    "canonical_family",
    "make_scenario",
]
