"""JDFL (SPEC Part C): pseudo-domain discovery, the domain x class head and its graded / random
targets, as a plug-in over FedAvg, SCAFFOLD, FedDyn, FedDC and FedProc (`fedavg+jdfl-graded`)."""

from .discovery import Discovery, DiscoveryConfig, discover, elbow
from .targets import JointLabelLoss, collapse, graded_weights
from .wrapper import JDFL, Supervision

__all__ = [
    "JDFL",
    "Discovery",
    "DiscoveryConfig",
    "JointLabelLoss",
    "Supervision",
    "collapse",
    "discover",
    "elbow",
    "graded_weights",
]
