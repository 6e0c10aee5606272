"""What a run costs each client: bytes the server sends it, bytes it sends the server, and the
samples it computes on, counted as the algorithm hands them over (the table of issue 45:
communication and client compute are measured, not estimated from a formula).

Algorithms record what crosses the wire where it crosses: `send(i, payload)` for what the server
gives client i (a model, a generated model, an embedding network), `receive(i, payload)` for what
client i gives back (its update, a descriptor, a gradient). A payload is counted by the tensors it
holds, at their dtype (`numel * element_size`: float32 weights are 4 bytes each); the framing
of a real transport (Flower's messages) comes on top and is not counted. Client compute is
counted by `Context.job` (every job of one client: its samples x epochs, forward and backward)
and `forward(i, n)` (forward passes only, such as IFCA's choice of a cluster model). Training on
pooled data (Conditional as the paper runs it, Oracle, in simulation) needs the clients' data on
the server: each client's training set (images, labels, statistic) counts once as sent up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


def payload_bytes(payload) -> int:
    """Bytes of the tensors (and numpy arrays) in a tensor, array, dict, list or tuple of them."""
    if isinstance(payload, torch.Tensor):
        return payload.numel() * payload.element_size()
    if isinstance(payload, np.ndarray):
        return int(payload.nbytes)
    if isinstance(payload, dict):
        return sum(payload_bytes(v) for v in payload.values())
    if isinstance(payload, (list, tuple)):
        return sum(payload_bytes(v) for v in payload)
    if payload is None:
        return 0
    raise TypeError(f"cannot count the bytes of a {type(payload).__name__}")


@dataclass
class Traffic:
    """Per-client counters of one run (index = the training client's index)."""

    COUNTERS = ("down", "up", "trained", "forward")  # the int64 arrays below, as checkpoints save them

    clients: int
    down: np.ndarray = field(init=False)  # bytes server -> client
    up: np.ndarray = field(init=False)  # bytes client -> server
    trained: np.ndarray = field(init=False)  # samples, forward + backward
    forward: np.ndarray = field(init=False)  # samples, forward only
    data_sent: set = field(default_factory=set)  # clients whose training set went to the server (pooled)

    def __post_init__(self):
        for name in self.COUNTERS:
            setattr(self, name, np.zeros(self.clients, dtype=np.int64))

    def send(self, client: int, payload) -> None:
        self.down[client] += payload_bytes(payload)

    def receive(self, client: int, payload) -> None:
        self.up[client] += payload_bytes(payload)

    def train(self, client: int, samples: int) -> None:
        self.trained[client] += samples

    def forwarded(self, client: int, samples: int) -> None:
        self.forward[client] += samples

    def pooled_data(self, client: int, payload) -> None:
        """Client `client`'s training set goes to the server, once per run."""
        if client not in self.data_sent:
            self.data_sent.add(client)
            self.receive(client, payload)

    def as_saved(self) -> dict:
        """Plain lists, for a checkpoint (a resumed run goes on counting from there)."""
        return {**{k: getattr(self, k).tolist() for k in self.COUNTERS}, "data_sent": sorted(self.data_sent)}

    def restore(self, saved: dict | None) -> None:
        """Go on from a checkpoint's counters (as_saved); None: from zero."""
        if not saved:
            return
        for k in self.COUNTERS:
            getattr(self, k)[:] = np.asarray(saved[k], dtype=np.int64)
        self.data_sent = {int(i) for i in saved.get("data_sent", ())}

    def summary(self, rounds: int) -> dict:
        """Mean per client over the run, what a results row records (extra.traffic)."""
        return {
            "rounds": rounds,
            "bytes_down_per_client": float(self.down.mean()),
            "bytes_up_per_client": float(self.up.mean()),
            "samples_trained_per_client": float(self.trained.mean()),
            "samples_forward_per_client": float(self.forward.mean()),
        }
