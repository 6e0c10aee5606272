"""Every algorithm, by name. One file per algorithm; this registry is the only lookup
(names, plug-ins and hyper-parameters in text: algorithms.names)."""

from __future__ import annotations

from .dac import DAC, DACLoss
from .ditto import Ditto
from .fedavg import ConditionalFedAvg, FedAvg
from .fedavg_ft import FedAvgFT
from .feddc import FedDC
from .feddyn import FedDyn
from .fedproc import FedProc
from .fedprox import FedProx
from .fedrep import FedRep
from .gossip import Gossip
from .ifca import IFCA
from .oracle_fedavg import OracleFedAvg
from .pefll import PeFLL
from .pfedhn import PFedHN
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
    "Oracle-FedAvg": OracleFedAvg,  # FedAvg within each true cluster: the federated ceiling
    # federated optimisers (also JDFL's bases)
    "FedProx": FedProx,
    "SCAFFOLD": Scaffold,
    "FedDyn": FedDyn,
    "FedDC": FedDC,
    "FedProc": FedProc,
    # personalisation rivals of Conditional (issue 45)
    "FedAvg-FT": FedAvgFT,
    "FedRep": FedRep,
    "pFedHN": PFedHN,
    "PeFLL": PeFLL,
}

# The eight methods of the paper, in its table order; those not yet implemented are skipped by `all`.
PAPER_METHODS = ("Local", "FedAvg", "Gossip", "Ditto", "IFCA", "DAC", "Oracle", "Conditional")
# What `fedcond run` trains when no method is named: the paper's eight and the deployable Conditional.
DEFAULT_METHODS = PAPER_METHODS + ("Conditional-FedAvg",)

# Plug-ins layered on a base optimiser by name, `BASE+PLUGIN[(key=value,...)]` (SPEC Part C):
# e.g. `SCAFFOLD+jdfl-graded`, `FedAvg+jdfl-random(M=3)`, `FedAvg+expanded-hard`. Each sets the
# JDFL wrapper's scheme; its arguments are the wrapper's fields under the short keys of PLUGIN_ARGS.
PLUGINS: dict[str, dict] = {
    "jdfl-graded": {"scheme": "graded"},
    "jdfl-random": {"scheme": "random"},
    "expanded-hard": {"scheme": "hard"},
}
JDFL_BASES = ("FedAvg", "SCAFFOLD", "FedDyn", "FedDC", "FedProc", "FedProx")
PLUGIN_ARGS = {
    "m": "slots",
    "e0": "e0",
    "layers": "layers",
    "batch": "discovery_batch",
    "alpha": "alpha",
    "tau": "tau",
    "phi": "phi",
    "collapse": "collapse",
    "max_m": "max_slots",
    "init": "head_init",
    "draw": "draw",
}
