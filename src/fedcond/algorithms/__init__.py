"""Every algorithm, by name: the registry (algorithms.registry) and the names that pick from it
(algorithms.names: `NAME(key=value)`, `BASE+PLUGIN(args)`). One file per algorithm."""

from __future__ import annotations

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
from .names import canonical_name, make_algorithm, parse_call, parse_composite, resolve_methods
from .pooled import Conditional, Local, Oracle
from .registry import ALGORITHMS, DEFAULT_METHODS, JDFL_BASES, PAPER_METHODS, PLUGIN_ARGS, PLUGINS
from .scaffold import Scaffold

__all__ = [
    "DAC",
    "DACLoss",
    "Ditto",
    "ConditionalFedAvg",
    "FedAvg",
    "FedDC",
    "FedDyn",
    "FedProc",
    "FedProx",
    "Gossip",
    "IFCA",
    "Conditional",
    "Local",
    "Oracle",
    "Scaffold",
    "ALGORITHMS",
    "JDFL_BASES",
    "PLUGINS",
    "PLUGIN_ARGS",
    "canonical_name",
    "parse_call",
    "parse_composite",
    "DEFAULT_METHODS",
    "PAPER_METHODS",
    "Algorithm",
    "Context",
    "State",
    "hyperparameters",
    "make_algorithm",
    "resolve_methods",
]
