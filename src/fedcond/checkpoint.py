"""Checkpoints between rounds, so that an interrupted long run resumes where it stopped.

A JDFL run takes ~45 minutes on one core, a Ditto or CIFAR cell ~25: stopping a sweep used to lose
the cell in flight. With checkpoints, `run_method` writes the algorithm's State (everything it
has learned: algorithms keep nothing on themselves), the accuracy curve and the seconds spent (wall and CPU), at
most every `every_seconds`, atomically; a rerun of the same run loads it and goes on from the next
round. Every random stream in training is named by (seed, round, client), so the resumed run is
the uninterrupted one, bit for bit on CPU (tests/test_checkpoint.py checks every algorithm).

A checkpoint is used only by the same run of the same code: its file is named by the scenario,
method, protocol and seed, and it holds a fingerprint of fedcond's source, the library versions
and which compiled kernels run; a file from other code or another environment is ignored and
overwritten. The caller removes it once the result is safely recorded. A file is data, never code
(fedcond.safe_state: tensors plus JSON, read with torch's weights-only reader); a file in any other
form (an older fedcond's pickle, or one planted in the directory) is not loaded: a line says so and
the run starts over.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import safe_state

EVERY_SECONDS = 300.0  # default: a checkpoint costs well under a second, so at most ~5 minutes are lost


def _hash_source() -> str:
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    # report/ only reads finished rows (nothing in training imports it): editing it keeps checkpoints
    for path in sorted(
        p
        for p in root.rglob("*")
        if p.suffix in (".py", ".cpp") and p.is_file() and p.relative_to(root).parts[0] != "report"
    ):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


_LOADED = (
    _hash_source()
)  # read at import, as results.git_revision pins the commit: files edited later are not this code


def source_fingerprint() -> str:
    """sha256 of fedcond's own source files (Python and C++, the report package aside) as they were
    when this process loaded them."""
    return _LOADED


def environment() -> dict:
    """The libraries and the layers' implementation on this machine: a run resumed under others would
    mix two computations (the compiled kernels' self-check decides per CPU which run)."""
    from . import results
    from .models import cpu_kernels

    status = cpu_kernels.status()
    return {
        "versions": {k: v for k, v in results.versions().items() if k != "fedcond"},
        "torch_isa": torch.backends.cpu.get_cpu_capability(),
        "kernels_isa": status.get("isa"),
        "kernels_on": sorted(name for name, on in status["enabled"].items() if on),
    }


@dataclass
class Resumed:
    rounds_done: int
    state: object  # algorithms.State
    curve: list
    seconds: float  # spent before the interruption
    traffic: dict | None = None  # the run's traffic counters so far (algorithms/traffic.py)
    cpu_seconds: float | None = None  # CPU time spent before the interruption; None: not known


def _number_or_none(value) -> float | None:
    """A header's optional number: None where absent (a checkpoint from before it was kept) or not a number."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass
class Checkpoint:
    """One run's checkpoint file in `directory`; `identity` names the run (JSON-able)."""

    directory: Path
    identity: dict
    every_seconds: float = EVERY_SECONDS
    _last: float = field(default_factory=time.perf_counter, repr=False)
    _failed: bool = field(default=False, repr=False)
    _key: dict | None = field(default=None, repr=False)

    @property
    def identity_as_saved(self) -> dict:
        """The identity as a saved file holds it (JSON's reading: tuples become lists, other values strings)."""
        return json.loads(json.dumps(self.identity, sort_keys=True, default=str))

    @property
    def path(self) -> Path:
        digest = hashlib.sha256(json.dumps(self.identity_as_saved, sort_keys=True).encode()).hexdigest()[:20]
        return Path(self.directory) / f"{digest}.pt"

    def key(self) -> dict:
        """What must match for a file to be resumed: the run, the code, the libraries and what runs the
        layers (compiled kernels kept on this CPU, torch's ISA), which decide the float rounding.
        Computed once per Checkpoint (a run's saves and loads all happen in one process)."""
        if self._key is None:
            self._key = {
                "identity": self.identity_as_saved,
                "source": source_fingerprint(),
                "environment": environment(),
            }
        return self._key

    def _read(self, decode: bool) -> tuple[dict, object] | None:
        """(header, payload or None) of this run's file by this code, or None (no file, another run's
        or code's, unreadable). The payload (State, curve) is decoded only if `decode`."""
        try:
            header, text, tensors = safe_state.read(self.path, mmap=not decode)  # mmap: tensors stay on disk
        except FileNotFoundError:
            return None
        except safe_state.NotSafeState as e:  # nothing of it ran; it will be overwritten
            warnings.warn(f"fedcond: checkpoint {self.path} {e}; this run starts over", stacklevel=3)
            return None
        saved = header.get("key")
        if not isinstance(saved, dict):
            return None
        # the run and the code first: the environment may build and time the kernels
        if saved.get("source") != source_fingerprint() or saved.get("identity") != self.identity_as_saved:
            return None
        if saved != json.loads(json.dumps(self.key())):
            return None
        if not decode:
            return header, None
        try:
            return header, safe_state.decode(text, tensors)
        except safe_state.NotSafeState as e:
            warnings.warn(f"fedcond: checkpoint {self.path} {e}; this run starts over", stacklevel=3)
            return None

    def load(self) -> Resumed | None:
        """The saved progress of this run by this code, or None (no file, another code's, unreadable)."""
        read = self._read(decode=True)
        if read is None:
            return None
        header, payload = read
        self._last = time.perf_counter()
        return Resumed(
            int(header["rounds_done"]),
            payload["state"],
            payload["curve"],
            float(header["seconds"]),
            payload.get("traffic"),
            _number_or_none(header.get("cpu_seconds")),
        )

    def progress(self) -> tuple[int, float] | None:
        """(rounds done, seconds spent) that a rerun would resume from, or None; cheap (the tensors
        are mapped, not read, and the State is not decoded), for planning: `sweep --dry-run` and the
        progress bar."""
        read = self._read(decode=False)
        return None if read is None else (int(read[0]["rounds_done"]), float(read[0]["seconds"]))

    def due(self) -> bool:
        return time.perf_counter() - self._last >= self.every_seconds

    def save(
        self,
        rounds_done: int,
        state,
        curve: list,
        seconds: float,
        traffic: dict | None = None,
        cpu_seconds: float | None = None,
    ) -> None:
        """Write atomically (a temporary file, then a rename): a kill mid-write leaves the last one.
        A save that fails (disk full, no permission) is warned about once and checkpoints stop for
        this run: training goes on, as without checkpoints."""
        if self._failed:
            return
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            self._remove_temporaries()  # a save killed mid-write leaves one behind
            self.path.parent.mkdir(parents=True, exist_ok=True)
            safe_state.save(
                tmp,
                {"state": state, "curve": curve, "traffic": traffic},
                header={"key": self.key(), "rounds_done": rounds_done, "seconds": seconds, "cpu_seconds": cpu_seconds},
            )
            os.replace(tmp, self.path)
        except (OSError, RuntimeError, TypeError) as e:  # torch.save reports a full disk as RuntimeError
            self._failed = True
            tmp.unlink(missing_ok=True)
            warnings.warn(
                f"fedcond: cannot save a checkpoint in {self.directory} ({e}); this run goes on without", stacklevel=2
            )
        self._last = time.perf_counter()

    def _remove_temporaries(self) -> None:
        for stale in Path(self.directory).glob(f"{self.path.name}.*.tmp"):
            stale.unlink(missing_ok=True)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        self._remove_temporaries()
