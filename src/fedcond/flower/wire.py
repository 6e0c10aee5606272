"""How jobs, results and models travel in Flower messages.

A message carries weights as ArrayRecords (float32 round-trips exactly, so a client trains from
the very bits the server holds) and everything else as one JSON ConfigRecord. Two markers stand in
for what must not travel: `RemoteData` (a client's data and statistics, on the server side) and
`ClientHeld` (a model that lives on one client only, e.g. Ditto's personal model).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from ..engine import Job, JobResult, Params, Regulariser, SGDConfig
from ..errors import FedcondError


@dataclass(frozen=True)
class RemoteData:
    """Client `index`'s training data (or statistics), which only that client holds."""

    index: int


@dataclass(frozen=True)
class ClientHeld:
    """A model kept on client `index` under `slot`; the server only ever holds this name."""

    index: int
    slot: str


def to_record(params: Params) -> ArrayRecord:
    return ArrayRecord({k: v.detach().cpu().contiguous() for k, v in params.items()})


def from_record(record: ArrayRecord) -> Params:
    return {k: torch.from_numpy(arr.numpy().copy()) for k, arr in record.items()}


class Blobs:
    """Distinct weight dicts of one message, each sent once (a broadcast model is also the prox anchor)."""

    def __init__(self):
        self.records: dict[str, ArrayRecord] = {}
        self._ids: dict[int, str] = {}

    def ref(self, params: Params | ClientHeld | None):
        if params is None:
            return None
        if isinstance(params, ClientHeld):
            return {"held": params.slot}
        key = self._ids.get(id(params))
        if key is None:
            key = self._ids[id(params)] = f"w{len(self._ids)}"
            self.records[key] = to_record(params)
        return key


def encode_jobs(jobs: list[Job], spec_json: str, kind: str = "train", **extra) -> RecordDict:
    blobs, out = Blobs(), []
    for job in jobs:
        if job.loss_fn is not None:
            raise FedcondError("custom local losses (FedProc, JDFL) do not run over Flower yet")
        reg = job.regulariser
        out.append(
            {
                "params": blobs.ref(job.params),
                "epochs": job.epochs,
                "seed": list(job.seed),
                "momentum": blobs.ref(job.momentum),
                "keep_momentum": job.keep_momentum,
                "sgd": None
                if job.sgd is None
                else [
                    job.sgd.lr,
                    job.sgd.momentum,
                    job.sgd.batch_size,
                    job.sgd.weight_decay,
                    job.sgd.max_grad_norm,
                    job.sgd.precision,
                    job.sgd.drop_last,
                ],
                "reg": None
                if reg is None
                else {"mu": reg.mu, "anchor": blobs.ref(reg.anchor), "linear": blobs.ref(reg.linear)},
            }
        )
    content = RecordDict({**blobs.records})
    content["job"] = ConfigRecord(
        {"kind": kind, "spec": spec_json, "jobs": json.dumps(out), **{k: json.dumps(v) for k, v in extra.items()}}
    )
    return content


def decode_jobs(content: RecordDict, held: dict[str, Params]) -> list[dict]:
    """The jobs of a message as keyword dicts for `Job` (data fields left for the client to fill)."""

    def get(ref):
        if ref is None:
            return None
        if isinstance(ref, dict):
            if ref["held"] not in held:
                raise FedcondError(f"this client holds no model '{ref['held']}'")
            return held[ref["held"]]
        return from_record(content[ref])

    out = []
    for j in json.loads(content["job"]["jobs"]):
        reg = j["reg"]
        out.append(
            {
                "params": get(j["params"]),
                "epochs": int(j["epochs"]),
                "seed": tuple(j["seed"]),
                "momentum": get(j["momentum"]),
                "keep_momentum": bool(j["keep_momentum"]),
                "sgd": None if j["sgd"] is None else SGDConfig(*j["sgd"][:2], int(j["sgd"][2]), *j["sgd"][3:]),
                "regulariser": None
                if reg is None
                else Regulariser(mu=reg["mu"], anchor=get(reg["anchor"]), linear=get(reg["linear"])),
                "held_slot": j["params"]["held"] if isinstance(j["params"], dict) else None,
            }
        )
    return out


def encode_results(results: list[JobResult], held_slots: list[str | None]) -> RecordDict:
    content, meta = RecordDict(), []
    for j, (res, slot) in enumerate(zip(results, held_slots)):
        if slot is None:
            content[f"p{j}"] = to_record(res.params)
        if res.momentum is not None:
            content[f"m{j}"] = to_record(res.momentum)
        meta.append({"loss": res.mean_loss, "steps": res.steps, "losses": res.losses, "held": slot})
    content["result"] = ConfigRecord({"results": json.dumps(meta)})
    return content


def decode_results(content: RecordDict, index: int) -> list[JobResult]:
    out = []
    for j, meta in enumerate(json.loads(content["result"]["results"])):
        params = ClientHeld(index, meta["held"]) if meta["held"] is not None else from_record(content[f"p{j}"])
        momentum = from_record(content[f"m{j}"]) if f"m{j}" in content else None
        out.append(JobResult(params, momentum, float(meta["loss"]), int(meta["steps"]), list(meta["losses"])))
    return out
