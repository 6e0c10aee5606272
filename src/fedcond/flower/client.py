"""The ClientApp's side: one client's data, statistics and personal models, none of which leave it.

The client learns its index from the SuperNode's node config (`partition-id`), rebuilds the
scenario from the run's spec (deterministic) and keeps only its own split. Everything it must
remember between messages lives in its Flower node state (`context.state`): the raw and
normalised statistics, the key of the secure sum, models it holds for itself, and its DP-SGD
accounting. Replies carry only weights, losses and counts.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from ..client_stats import raw_statistics
from ..engine import Job, LoopEngine, SGDConfig, mean_loss, predict
from ..errors import FedcondError
from ..models import ModelSpec
from . import secure_sum
from .config import FlowerRun
from .wire import decode_jobs, encode_results, from_record, to_record

_SCENARIOS: dict = {}  # per process: a Ray actor serves many simulated nodes of the same scenario
_ENGINES: dict = {}


def _setup(context: Context) -> tuple[FlowerRun, int]:
    rec = context.state.get("fedcond.setup")
    if rec is None:
        raise FedcondError("this client has not been set up (no hello message)")
    return FlowerRun.from_json(rec["run"]), int(rec["index"])


def _index(context: Context) -> int:
    if "partition-id" not in context.node_config:
        raise FedcondError("the SuperNode needs node config partition-id=<client index>")
    return int(context.node_config["partition-id"])


def _scenario(run: FlowerRun, context: Context):
    data_dir = context.node_config.get("data-dir") or run.spec.data_dir
    spec = dataclasses.replace(run.spec, data_dir=data_dir)
    if spec not in _SCENARIOS:
        _SCENARIOS.clear()  # one scenario per process at a time
        _SCENARIOS[spec] = spec.build()
    return _SCENARIOS[spec]


def _my_data(context: Context):
    run, index = _setup(context)
    fed = _scenario(run, context).federation
    return run, index, fed, fed.clients[index]


def _engine(sgd: SGDConfig) -> LoopEngine:
    if sgd not in _ENGINES:
        _ENGINES[sgd] = LoopEngine(sgd)
    return _ENGINES[sgd]


def _spec(text: str) -> ModelSpec:
    d = json.loads(text)
    d["input_shape"] = tuple(d["input_shape"])
    d["mean"] = tuple(d["mean"]) if d["mean"] is not None else None
    d["std"] = tuple(d["std"]) if d["std"] is not None else None
    return ModelSpec(**d)


def _held(context: Context) -> dict:
    return {k[len("held:") :]: from_record(v) for k, v in context.state.array_records.items() if k.startswith("held:")}


def _stats(context: Context) -> torch.Tensor:
    rec = context.state.get("fedcond.stats")
    if rec is None or "s" not in rec:
        raise FedcondError("this client's statistics have not been normalised yet")
    return torch.from_numpy(rec["s"].numpy().copy()).to(torch.float32)  # [L]


def _reply(msg: Message, result: dict | ConfigRecord | MetricRecord, **records) -> Message:
    content = RecordDict(records)
    content["result"] = result if not isinstance(result, dict) else ConfigRecord(result)
    return Message(content, reply_to=msg)


app = ClientApp()


@app.query("hello")
def hello(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    job = msg.content["job"]
    index = _index(context)
    for key in [k for k in context.state.keys() if k.startswith(("fedcond.", "held:"))]:
        del context.state[key]  # a hello starts a new fedcond run on this node: nothing carries over
    context.state["fedcond.setup"] = ConfigRecord({"run": json.loads(job["run"]), "index": index})
    run, _, fed, me = _my_data(context)
    if index >= fed.num_clients:
        raise FedcondError(f"partition-id {index} does not exist: the scenario has {fed.num_clients} clients")
    info = {
        "index": index,
        "n_train": me.n_train,
        "n_test": me.n_test,
        "family": fed.family,
        "dataset": fed.dataset,
        "num_classes": fed.num_classes,
        "input_shape": list(fed.input_shape),
        "mean": list(fed.mean),
        "std": list(fed.std),
    }
    return _reply(msg, {"info": json.dumps(info)})


def _raw_stats(context: Context) -> np.ndarray:
    """This client's statistic (protocol.statistic), computed once from its own data and kept in
    its node state."""
    rec = context.state.get("fedcond.stats")
    if rec is not None:
        return rec["raw"].numpy().copy()
    run, index, fed, me = _my_data(context)
    raw = raw_statistics(fed, run.protocol, run.spec.data_dir, run.seed, clients=[me], ids=[index])[0]
    context.state["fedcond.stats"] = ArrayRecord({"raw": torch.from_numpy(raw)})
    return raw


def _secagg_trust(context: Context, run: FlowerRun) -> tuple[int, bytes | None, dict[int, bytes] | None]:
    """(min_peers, this node's identity key, the roster) from the node's own config, never from the
    server: `secagg-min-peers` (default secure_sum.default_min_peers of the roster's size, else of
    the run's), `secagg-identity` (a file: this client's Ed25519 private key, hex) and
    `secagg-roster` (a file: JSON {client index: Ed25519 public key, hex})."""
    cfg = context.node_config
    try:
        identity = (
            bytes.fromhex(Path(str(cfg["secagg-identity"])).read_text().strip()) if "secagg-identity" in cfg else None
        )
        roster = (
            {int(k): bytes.fromhex(v) for k, v in json.loads(Path(str(cfg["secagg-roster"])).read_text()).items()}
            if "secagg-roster" in cfg
            else None
        )
    except (OSError, ValueError, AttributeError) as e:
        raise FedcondError(f"secure sum: cannot read this node's secagg-identity or secagg-roster ({e})") from None
    default = secure_sum.default_min_peers(len(roster) if roster else run.clients)
    return int(cfg.get("secagg-min-peers", default)), identity, roster


@app.query("secagg")
def secagg(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    job = msg.content["job"]
    run, index = _setup(context)
    min_peers, identity, roster = _secagg_trust(context, run)
    if job["phase"] == "keys":
        private, public = secure_sum.new_keypair()
        context.state["fedcond.secagg"] = ConfigRecord({"private": private, "public": public})
        signature = secure_sum.sign_key(identity, index, public) if identity is not None else b""
        return _reply(msg, {"public": public, "signature": signature})
    raw = _raw_stats(context)
    publics = {int(k): bytes.fromhex(v) for k, v in json.loads(job["publics"]).items()}
    signatures = {int(k): bytes.fromhex(v) for k, v in json.loads(job.get("signatures", "{}")).items()}
    mine = context.state["fedcond.secagg"]
    upload = secure_sum.client_upload(
        raw, index, mine["private"], mine["public"], publics, min_peers, signatures, roster
    )
    return _reply(msg, {"masked": upload})


@app.query("stats")
def normalise_stats(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    job = msg.content["job"]
    raw = _raw_stats(context)
    if job["how"] == "log":
        s = np.log1p(raw)
    else:
        mean, std = np.asarray(json.loads(job["mean"])), np.asarray(json.loads(job["std"]))
        s = (raw - mean) / np.where(std > 0, std, 1.0)  # as stats.normalise: constant components become 0
    context.state["fedcond.stats"] = ArrayRecord(
        {"raw": torch.from_numpy(raw), "s": torch.from_numpy(s).to(torch.float32)}
    )
    return _reply(msg, {"ok": True})


@app.query("hold")
def hold(msg: Message, context: Context) -> Message:
    job = msg.content["job"]
    context.state[f"held:{job['slot']}"] = msg.content[job["ref"]]
    return _reply(msg, {"ok": True})


@app.train()
def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    run, index, fed, me = _my_data(context)
    group = msg.metadata.group_id
    if any(group == f"round {r + 1}" and index == c for c, r in run.drop):
        raise RuntimeError(f"client {index} drops out in {group} (fault injected by the run's drop setting)")
    spec = _spec(msg.content["job"]["spec"])
    s = _stats(context).expand(me.n_train, -1) if spec.conditioned else None  # [n, L]
    jobs = decode_jobs(msg.content, _held(context))
    slots = [j.pop("held_slot") for j in jobs]
    sgd = SGDConfig.of(run.protocol)
    built = [Job(x=me.x_train, y=me.y_train, s=s, **j) for j in jobs]
    if run.dp is not None:
        from .dp import train_private

        results = [train_private(spec, job, sgd, run.dp, context) for job in built]
    else:
        results = _engine(sgd).train(spec, built)
    for res, slot in zip(results, slots):
        if slot is not None:
            context.state[f"held:{slot}"] = to_record(res.params)
    return Message(encode_results(results, slots), reply_to=msg)


@app.query("losses")
def losses(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    run, index, fed, me = _my_data(context)
    spec = _spec(msg.content["job"]["spec"])
    s = _stats(context).expand(me.n_train, -1) if spec.conditioned else None
    held = _held(context)
    model = _engine(SGDConfig()).model(spec)
    out = []
    for ref in json.loads(msg.content["job"]["models"]):
        params = held[ref["held"]] if isinstance(ref, dict) else from_record(msg.content[ref])
        out.append(mean_loss(model, params, me.x_train, me.y_train, s))
    return _reply(msg, {"losses": json.dumps(out)})


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    run, index, fed, me = _my_data(context)
    spec = _spec(msg.content["job"]["spec"])
    ref = json.loads(msg.content["job"]["ref"])
    params = _held(context)[ref["held"]] if isinstance(ref, dict) else from_record(msg.content[ref])
    s = _stats(context).expand(me.n_test, -1) if spec.conditioned else None
    pred = predict(spec.build(), params, me.x_test, s)
    metrics = {"correct": int((pred == me.y_test).sum()), "total": me.n_test}
    if run.dp is not None:
        from .dp import spent_epsilon

        metrics["epsilon"] = spent_epsilon(context, run.dp.delta)
    return _reply(msg, MetricRecord(metrics))
