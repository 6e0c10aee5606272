"""Learned state on disk as data, never code: tensors plus JSON, read with `torch.load(weights_only=True)`.

A pickle runs whatever its author wrote when it is read, so a checkpoint file planted beside a
database (or passed as `--checkpoint`) must not be a pickle of arbitrary objects. A file here is
`torch.save` of a dict of three entries only: `format`, `json` (the structure, as JSON text) and
`tensors` (name -> tensor). torch's weights-only reader rebuilds tensors, dicts and strings and
refuses every other global, so a file that is anything else is refused before any of it runs.

The JSON tags what JSON cannot say itself: tuples, dicts with non-string keys, tensors and numpy
arrays (stored as tensors, so their bits and dtypes come back exactly), numpy scalars, and
dataclasses of fedcond's own modules (an algorithm's State, JDFL's Discovery, Flower's
ClientHeld). A dataclass is rebuilt field by field without running its code, and only if its
class is already loaded in this process from a `fedcond` module: the file names data, not code.
Floats go through JSON's shortest repr, which reads back to the same double (nan and inf too).
"""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import torch

from .errors import FedcondError

FORMAT = "fedcond.safe-state/1"


class NotSafeState(FedcondError):
    """A file that is not in this format: refused unread (it may be an older fedcond's pickle, or planted)."""


def encode(obj) -> tuple[str, dict[str, torch.Tensor]]:
    """(JSON text, tensors) that `decode` turns back into `obj`; TypeError for anything else."""
    tensors: dict[str, torch.Tensor] = {}
    seen: dict[int, str] = {}  # one tensor held twice is stored once, as torch.save kept it

    def tensor_ref(t: torch.Tensor) -> str:
        if id(t) not in seen:
            seen[id(t)] = str(len(tensors))
            tensors[seen[id(t)]] = t
        return seen[id(t)]

    def enc(x):
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, np.generic):  # before int/float: np.float64 is a float
            return {"np": x.dtype.str, "v": x.item()}
        if isinstance(x, (int, float)):
            return x
        if isinstance(x, torch.Tensor):
            return {"T": tensor_ref(x)}
        if isinstance(x, np.ndarray):
            if x.dtype.kind not in "biuf":
                raise TypeError(f"cannot store a numpy array of dtype {x.dtype}")
            return {"A": tensor_ref(torch.from_numpy(np.array(x, copy=True)))}
        if isinstance(x, tuple):
            return {"t": [enc(v) for v in x]}
        if isinstance(x, list):
            return {"l": [enc(v) for v in x]}
        if isinstance(x, dict):
            return {"d": [[enc(k), enc(v)] for k, v in x.items()]}
        if dataclasses.is_dataclass(x) and not isinstance(x, type) and type(x).__module__.split(".")[0] == "fedcond":
            cls = type(x)
            return {
                "C": f"{cls.__module__}:{cls.__qualname__}",
                "f": {f.name: enc(getattr(x, f.name)) for f in dataclasses.fields(x)},
            }
        raise TypeError(f"cannot store a {type(x).__module__}.{type(x).__qualname__} as data")

    return json.dumps(enc(obj)), tensors


def _loaded_class(name: str) -> type:
    module, _, qualname = name.partition(":")
    if module.split(".")[0] != "fedcond" or module not in sys.modules:  # never import what a file names
        raise NotSafeState(f"names the class {name}, which is not a loaded fedcond dataclass")
    cls = sys.modules[module]
    for part in qualname.split("."):
        cls = getattr(cls, part, None)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise NotSafeState(f"names the class {name}, which is not a loaded fedcond dataclass")
    return cls


def decode(text: str, tensors: dict[str, torch.Tensor]):
    def dec(x):
        if not isinstance(x, dict):
            return x
        if "T" in x:
            return tensors[x["T"]]
        if "A" in x:
            return tensors[x["A"]].numpy()
        if "np" in x:
            return np.dtype(x["np"]).type(x["v"])
        if "t" in x:
            return tuple(dec(v) for v in x["t"])
        if "l" in x:
            return [dec(v) for v in x["l"]]
        if "d" in x:
            return {_hashable(dec(k)): dec(v) for k, v in x["d"]}
        if "C" in x:
            cls = _loaded_class(x["C"])
            obj = cls.__new__(cls)  # the saved fields, exactly: no __init__ or __post_init__ runs
            for f in dataclasses.fields(cls):
                object.__setattr__(obj, f.name, dec(x["f"][f.name]))
            return obj
        raise NotSafeState(f"holds an unknown entry {sorted(x)}")

    try:
        return dec(json.loads(text))
    except (KeyError, TypeError, ValueError) as e:
        raise NotSafeState(f"does not decode ({type(e).__name__}: {e})") from e


def _hashable(k):
    return tuple(_hashable(v) for v in k) if isinstance(k, list) else k


def save(path, obj, header: dict | None = None) -> None:
    """Write `obj` (and a small JSON `header`, readable without the tensors) to `path` with torch.save."""
    text, tensors = encode(obj)
    torch.save({"format": FORMAT, "header": json.dumps(header or {}), "json": text, "tensors": tensors}, path)


def read(path, mmap: bool = False) -> tuple[dict, str, dict]:
    """(header, JSON text, tensors) of a file in this format; FileNotFoundError if there is none;
    NotSafeState for any other file (a pickle of objects is refused by torch's weights-only reader
    before any of it runs; a torn file does not read)."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise
    except Exception as e:  # noqa: BLE001 - refused by the weights-only reader, torn, or no torch file at all
        raise NotSafeState(
            f"is not a readable fedcond safe-state file and was not loaded ({type(e).__name__})"
        ) from None
    if not (
        isinstance(data, dict)
        and data.get("format") == FORMAT
        and isinstance(data.get("json"), str)
        and isinstance(data.get("header"), str)
        and isinstance(data.get("tensors"), dict)
    ):
        raise NotSafeState("is not a fedcond safe-state file")
    try:
        header = json.loads(data["header"])
    except ValueError as e:
        raise NotSafeState(f"has an unreadable header ({e})") from e
    return header, data["json"], data["tensors"]


def load(path) -> tuple[dict, object]:
    """(header, object) of a file written by `save`."""
    header, text, tensors = read(path)
    return header, decode(text, tensors)
