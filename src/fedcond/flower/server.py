"""The ServerApp's side: our algorithms' own `init`/`round` code, run against clients it cannot see.

The server's `Context` holds a federation of `RemoteClient`s (sizes only) and no statistics; its
`pooled` hands out `RemoteData` markers instead of tensors. `FlowerEngine.train` turns the jobs an
algorithm builds into one message per client (weights and hyper-parameters), and the replies into
`JobResult`s. Models that belong to one client (Ditto's personal models) are replaced by
`ClientHeld` names after `init`, so they are trained, kept and evaluated on that client only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from flwr.app import ConfigRecord, Message, RecordDict

from ..algorithms import Context, State, hyperparameters, make_algorithm
from ..engine import Job, JobResult, SGDConfig
from .. import safe_state, stats as S
from ..errors import FedcondError
from ..models import ModelSpec
from ..protocol import conditioning_of, input_normalisation
from ..scenarios.federation import Federation
from ..simulate import run_rounds
from . import secure_sum
from .config import FlowerRun
from .wire import Blobs, ClientHeld, RemoteData, decode_results, encode_jobs


@dataclass(frozen=True)
class RemoteClient:
    """What the server knows of a client: its index and how many samples it has."""

    index: int
    n_train: int
    n_test: int


class ServerContext(Context):
    """An algorithm's `Context` on the server: data and statistics are markers, never tensors."""

    def pooled(self, members: tuple[int, ...], conditioned: bool):
        if len(members) != 1:
            raise FedcondError(
                "training on several clients' pooled data is not federated; use a server-topology method"
            )
        i = members[0]
        return RemoteData(i), RemoteData(i), (RemoteData(i) if conditioned else None)

    def client_stats(self, i: int, n: int):
        raise FedcondError("the server never holds client statistics")


def _first_line(text: str, limit: int = 300) -> str:
    """A client's error reason, fit for a one-line message (a traceback keeps its last line: the error)."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    line = lines[-1] if lines else "no reason given"
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _message(content: RecordDict, node: int, kind: str, group: str) -> Message:
    return Message(content, dst_node_id=node, message_type=kind, group_id=group)


class Exchange:
    """Send one message per client and collect the replies that come back in time."""

    def __init__(self, grid, nodes: dict[int, int], timeout: float | None, log: Callable[[str], None]):
        self.grid, self.nodes, self.timeout, self.log = grid, nodes, timeout, log
        self.index_of = {node: i for i, node in nodes.items()}
        self.dropped: list[tuple[str, int]] = []
        self.failures: dict[int, str] = {}  # client -> the reason of its last error reply

    def __call__(self, contents: dict[int, RecordDict], kind: str, group: str) -> dict[int, RecordDict]:
        msgs = [_message(c, self.nodes[i], kind, group) for i, c in contents.items()]
        replies = self.grid.send_and_receive(msgs, timeout=self.timeout)
        out = {}
        for m in replies:
            i = self.index_of.get(m.metadata.src_node_id)
            if i is None:
                continue
            if m.has_error():
                self.failures[i] = str(m.error.reason)
                self.log(f"client {i} failed in {group}: {m.error.reason}")
                continue
            out[i] = m.content
        for i in contents:
            if i not in out:
                self.dropped.append((group, i))
        return out


class FlowerEngine:
    """The engine interface (`train`, `losses`, `sgd`) over Flower messages.

    A client that does not answer gets `None` for its jobs; the algorithms aggregate the replies
    they got. Fewer than `min_replies` answering clients stops the run with a clear error.
    """

    name = "flower"

    def __init__(self, exchange: Exchange, sgd: SGDConfig, min_replies: int):
        self.exchange, self.sgd, self.min_replies = exchange, sgd, min_replies
        self.group = "setup"

    def _check(self, asked: int, got: int) -> None:
        if got < min(self.min_replies, asked):
            raise FedcondError(f"{self.group}: only {got} of {asked} clients replied (min_replies={self.min_replies})")

    def train(self, spec: ModelSpec, jobs: list[Job]) -> list[JobResult | None]:
        by_client: dict[int, list[int]] = defaultdict(list)
        for j, job in enumerate(jobs):
            by_client[job.x.index].append(j)
        spec_json = json.dumps(dataclasses.asdict(spec))
        contents = {i: encode_jobs([jobs[j] for j in js], spec_json) for i, js in by_client.items()}
        replies = self.exchange(contents, "train", self.group)
        self._check(len(contents), len(replies))
        results: list[JobResult | None] = [None] * len(jobs)
        for i, content in replies.items():
            for j, res in zip(by_client[i], decode_results(content, i)):
                results[j] = res
        return results

    def losses(self, spec: ModelSpec, items: list[tuple]) -> list[float]:
        """Mean loss of each (params, data marker, ...) on that client's training data; +inf for a
        client that does not answer (it then picks the first model, and its training job will tell)."""
        by_client: dict[int, list[int]] = defaultdict(list)
        for k, item in enumerate(items):
            by_client[item[1].index].append(k)
        contents = {}
        for i, ks in by_client.items():
            blobs = Blobs()
            refs = [blobs.ref(items[k][0]) for k in ks]
            content = RecordDict({**blobs.records})
            content["job"] = ConfigRecord({"spec": json.dumps(dataclasses.asdict(spec)), "models": json.dumps(refs)})
            contents[i] = content
        replies = self.exchange(contents, "query.losses", self.group)
        out = [float("inf")] * len(items)
        for i, content in replies.items():
            for k, loss in zip(by_client[i], json.loads(content["result"]["losses"])):
                out[k] = float(loss)
        return out

    def close(self) -> None:
        pass


def wait_for_nodes(grid, count: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= count:
            return nodes
        if time.monotonic() > deadline:
            raise FedcondError(f"only {len(nodes)} of {count} SuperNodes connected within {timeout:.0f} s")
        time.sleep(0.2)


def hold_personal_models(state: State, num_clients: int, exchange: Exchange) -> State:
    """Models that exactly one client predicts with (Ditto's v_i) go to that client and stay there."""
    users: dict[int, list[int]] = defaultdict(list)
    for i, m in enumerate(state.assignment):
        users[m].append(i)
    personal = {m: who[0] for m, who in users.items() if len(who) == 1 and num_clients > 1}
    if not personal:
        return state
    contents = {}
    for m, i in personal.items():
        blobs = Blobs()
        ref = blobs.ref(state.models[m])
        content = RecordDict({**blobs.records})
        content["job"] = ConfigRecord({"slot": f"model{m}", "ref": ref})
        contents[i] = content
    replies = exchange(contents, "query.hold", "init")
    if len(replies) < len(contents):
        raise FedcondError("a client did not take its personal model at the start")
    models = list(state.models)
    for m, i in personal.items():
        models[m] = ClientHeld(i, f"model{m}")
    return dataclasses.replace(state, models=tuple(models))


def secure_normalisation(exchange: Exchange, clients: list[int], width: int, how: str, log) -> None:
    """Every client ends with its normalised s_i in its node state; the server sees only sums."""
    if how == "log":
        replies = exchange(
            {i: RecordDict({"job": ConfigRecord({"how": "log"})}) for i in clients}, "query.stats", "stats"
        )
    else:
        keys = exchange(
            {i: RecordDict({"job": ConfigRecord({"phase": "keys"})}) for i in clients}, "query.secagg", "stats"
        )
        if len(keys) < len(clients):
            raise FedcondError(
                "secure normalisation: a client dropped out during the key exchange; start the run again"
            )
        publics = {str(i): keys[i]["result"]["public"].hex() for i in clients}
        signatures = {str(i): keys[i]["result"].get("signature", b"").hex() for i in clients}  # checked by each client
        job = {"phase": "masked", "publics": json.dumps(publics), "signatures": json.dumps(signatures)}
        uploads = exchange({i: RecordDict({"job": ConfigRecord(job)}) for i in clients}, "query.secagg", "stats")
        if len(uploads) < len(clients):
            raise FedcondError(
                "secure normalisation: a client dropped out or refused the key list before its masked upload; "
                "start the run again"
            )
        s1, s2 = secure_sum.unmask_sums({i: uploads[i]["result"]["masked"] for i in clients}, width)
        mean, std = secure_sum.zscore_from_sums(s1, s2, len(clients))
        content = {"how": "zscore", "mean": json.dumps(mean.tolist()), "std": json.dumps(std.tolist())}
        replies = exchange({i: RecordDict({"job": ConfigRecord(content)}) for i in clients}, "query.stats", "stats")
        log(f"statistics z-scored from a masked secure sum over {len(clients)} clients")
    if len(replies) < len(clients):
        raise FedcondError("a client failed to compute its statistics")


def save_checkpoint(path: Path, run: FlowerRun, state: State, done: int) -> None:
    tmp = path.with_suffix(".tmp")
    safe_state.save(tmp, state, header={"run": run.to_json(), "rounds_done": done})  # data, never code
    os.replace(tmp, path)  # atomic: a crash mid-write leaves the previous checkpoint


def load_checkpoint(path: Path, run: FlowerRun) -> tuple[State, int] | None:
    """The state saved at `path` by this run, or None if there is no file. Anything but a safe-state
    file of this run (an older fedcond's pickle, a planted file) stops the run unread."""
    try:
        header, text, tensors = safe_state.read(path)
    except FileNotFoundError:
        return None
    except safe_state.NotSafeState as e:
        raise FedcondError(f"checkpoint {path} {e}; remove it or choose another path") from None
    try:
        old = FlowerRun.from_json(header["run"])
        done = int(header["rounds_done"])
    except (KeyError, TypeError, ValueError) as e:
        raise FedcondError(
            f"checkpoint {path} does not say which run it belongs to ({e}); remove it or choose another path"
        ) from None
    if dataclasses.replace(old, rounds=None, drop=()) != dataclasses.replace(run, rounds=None, drop=()):
        raise FedcondError(f"checkpoint {path} belongs to a different run; remove it or choose another path")
    state = safe_state.decode(text, tensors)
    if not isinstance(state, State):
        raise FedcondError(f"checkpoint {path} does not hold a training state; remove it or choose another path")
    return state, done


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def serve(grid, run: FlowerRun, log: Callable[[str], None] = _to_stderr) -> dict:
    """The whole run on the server: connect, normalise statistics, rounds, client-side evaluation."""
    torch.set_num_threads(1)
    start = time.perf_counter()
    from ..scenarios.families import STANDARD  # their k (pathological: classes per client) counts no clusters

    alg = make_algorithm(run.method, num_clusters=None if run.spec.family in STANDARD else run.spec.k, **run.hyper)
    if not alg.federated or alg.needs_truth:
        raise FedcondError(f"{run.method} trains on pooled data or needs the true clusters; it has no federated form")
    exchange, fed = connect(grid, run, alg.conditioned, log)
    ctx = server_context(exchange, fed, run, alg.conditioned, log, conditioning_of(alg, run.protocol))
    ckpt_path = Path(run.checkpoint) if run.checkpoint else None
    state, done = first_state(alg, ctx, exchange, run, ckpt_path, log)
    history = []

    def before(r: int) -> None:
        ctx.engine.group = f"round {r + 1}"

    def after(r: int, state: State) -> None:
        history.append({"round": r + 1, "train_loss": state.train_loss})
        log(f"round {r + 1}/{run.num_rounds}: train loss {state.train_loss:.4f}")
        if ckpt_path:
            save_checkpoint(ckpt_path, run, state, r + 1)

    state = run_rounds(alg, ctx, state, range(done, run.num_rounds), run.method, before=before, after=after)
    scores = evaluate(exchange, ctx, state, alg.conditioned, run.min_replies)  # whoever answers; the rest listed
    return {
        "method": run.method,
        "experiment": run.experiment,
        "rounds": run.num_rounds,
        "resumed_after": done,
        **scores,
        "train_loss": state.train_loss,
        "history": history,
        "hyperparameters": hyperparameters(alg),
        "dropped": [list(d) for d in exchange.dropped],
        "seconds": time.perf_counter() - start,
        "delta": run.dp.delta if run.dp else None,
        "normalisation": run.normalisation if alg.conditioned else None,
    }


def connect(grid, run: FlowerRun, conditioned: bool, log: Callable[[str], None]) -> tuple[Exchange, Federation]:
    """Wait for the SuperNodes, learn which partition each holds, and the federation's shape (sizes only)."""
    nodes = wait_for_nodes(grid, run.clients, run.node_timeout)
    hello = Exchange(grid, {k: n for k, n in enumerate(nodes)}, run.reply_timeout, log)
    setup = {"run": run.to_json(), "conditioned": conditioned}
    info = hello(
        {
            k: RecordDict({"job": ConfigRecord({k2: json.dumps(v) for k2, v in setup.items()})})
            for k in range(len(nodes))
        },
        "query.hello",
        "hello",
    )
    metas = {k: json.loads(c["result"]["info"]) for k, c in info.items()}
    indices = sorted(m["index"] for m in metas.values())
    if indices != list(range(run.clients)):
        raise FedcondError(
            f"SuperNodes reported partitions {indices}; expected 0..{run.clients - 1}, one each"
            + "".join(f"; node {nodes[k]} failed: {_first_line(why)}" for k, why in sorted(hello.failures.items()))
            + "".join(
                f"; node {nodes[k]} did not answer"
                for k in range(len(nodes))
                if k not in info and k not in hello.failures
            )
        )
    node_of = {metas[k]["index"]: nodes[k] for k in metas}
    exchange = Exchange(grid, node_of, run.reply_timeout, log)
    first = metas[next(iter(metas))]
    clients = tuple(
        RemoteClient(m["index"], m["n_train"], m["n_test"]) for m in sorted(metas.values(), key=lambda m: m["index"])
    )
    fed = Federation(
        first["family"],
        first["dataset"],
        clients,
        first["num_classes"],
        tuple(first["input_shape"]),
        tuple(first["mean"]),
        tuple(first["std"]),
    )
    return exchange, fed


def server_context(
    exchange: Exchange,
    fed: Federation,
    run: FlowerRun,
    conditioned: bool,
    log: Callable[[str], None],
    conditioning: str,
) -> ServerContext:
    """The algorithm's context on the server (the clients' statistics normalised first, on the clients);
    `conditioning`: how the algorithm's model takes s (protocol.conditioning_of)."""
    protocol = run.protocol
    stat_dim = S.statistic_dim(protocol.statistic, protocol.num_eigenvalues, fed.num_classes)
    if conditioned:
        secure_normalisation(exchange, list(range(run.clients)), stat_dim, run.normalisation, log)
    mean, std = input_normalisation(protocol, fed.mean, fed.std)
    plain = ModelSpec(fed.input_shape, fed.num_classes, 0, protocol.conditioning, mean, std, protocol.model)
    engine = FlowerEngine(exchange, SGDConfig.of(protocol), run.min_replies)
    return ServerContext(
        federation=fed,
        plain_model=plain,
        conditioned_model=(
            dataclasses.replace(plain, stat_dim=stat_dim, conditioning=conditioning) if conditioned else None
        ),
        engine=engine,
        seed=run.seed,
        local_epochs=protocol.local_epochs,
        rounds=run.num_rounds,
        stats=None,
        truth=None,
    )


def first_state(
    alg, ctx: ServerContext, exchange: Exchange, run: FlowerRun, ckpt_path: Path | None, log: Callable[[str], None]
) -> tuple[State, int]:
    """The state to start from and the rounds already done: the checkpoint's, or `init`'s with the
    personal models handed to their clients."""
    resumed = load_checkpoint(ckpt_path, run) if ckpt_path else None
    if resumed is None:
        return hold_personal_models(alg.init(ctx), ctx.federation.num_clients, exchange), 0
    state, done = resumed
    if any(isinstance(m, ClientHeld) for m in state.models):
        raise FedcondError(
            "this method keeps models on the clients; a new run cannot resume them from the server's checkpoint"
        )
    log(f"resumed from {ckpt_path} after round {done}")
    return state, done


def evaluate(exchange: Exchange, ctx: ServerContext, state: State, conditioned: bool, min_replies: int = 1) -> dict:
    """Each client scores the model it is assigned on its own test set; only counts come back.
    A client that does not answer (it dropped out) is listed in `not_evaluated` with None in
    `per_client`; the accuracies are over the clients that answered, unless fewer than
    `min_replies` did."""
    spec_json = json.dumps(dataclasses.asdict(ctx.spec(conditioned)))
    contents = {}
    for i in range(ctx.federation.num_clients):
        blobs = Blobs()
        ref = blobs.ref(state.models[state.assignment[i]])
        content = RecordDict({**blobs.records})
        content["job"] = ConfigRecord({"spec": spec_json, "ref": json.dumps(ref)})
        contents[i] = content
    replies = exchange(contents, "evaluate", "evaluate")
    missing = sorted(set(contents) - set(replies))
    if len(replies) < min(min_replies, len(contents)):
        raise FedcondError(
            f"evaluate: only {len(replies)} of {len(contents)} clients returned their evaluation "
            f"(min_replies={min_replies}); clients {missing} did not"
        )
    per_client, correct, total, eps = [], 0, 0, []
    for i in range(len(contents)):
        if i not in replies:
            per_client.append(None)
            continue
        m = replies[i]["result"]
        per_client.append(m["correct"] / max(1, m["total"]))
        correct, total = correct + int(m["correct"]), total + int(m["total"])
        if "epsilon" in m:
            eps.append(float(m["epsilon"]))
    answered = [a for a in per_client if a is not None]
    return {
        "accuracy": float(np.mean(answered)),
        "accuracy_std": float(np.std(answered)),
        "weighted_accuracy": correct / max(1, total),
        "per_client": per_client,
        "not_evaluated": missing,
        "epsilon": max(eps) if eps else None,
    }
