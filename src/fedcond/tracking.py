"""Experiment trackers: each method's per-round metrics (round, metrics dict), as the round loop
reports them (simulate.run_method's `on_metrics`), written to TensorBoard, MLflow or a JSON-lines
file while training runs. `fedcond run --track KIND:TARGET` chooses them; the results database
stays the record, a tracker is a view of the run as it goes.

Trackers are written in the process that runs the command (worker processes send their rounds
back over the progress queue), so one writer owns each file."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .errors import FedcondError


class RoundTracker(Protocol):
    """One method's run as a tracker sees it."""

    def on_round(self, round: int, metrics: dict[str, float]) -> None:
        """After round `round` (1-based): the round's metrics (train_loss; accuracy and weighted_accuracy
        on the rounds the run evaluates, --eval-every)."""

    def finish(self, summary: dict) -> None:
        """The run ended: its final numbers (status, accuracy, weighted_accuracy, seconds), or its error."""


class Tracker(Protocol):
    """A back-end: opens one RoundTracker per method run; closed once every run has finished."""

    def start(self, method: str, params: dict) -> RoundTracker: ...

    def close(self) -> None: ...


# ---- JSON lines: the plain, dependency-free one -----------------------------------------------------
class JsonlTracker:
    """One JSON object per line: {"method", "event": "start" | "round" | "finish", ...}, flushed as written."""

    def __init__(self, path: str | Path):
        try:
            self._file = open(path, "a", encoding="utf-8")
        except OSError as e:
            raise FedcondError(f"--track jsonl: cannot open {path}: {e.strerror or e}") from None

    def _write(self, record: dict) -> None:
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()

    def start(self, method: str, params: dict) -> RoundTracker:
        self._write({"method": method, "event": "start", "params": params})
        return _JsonlRun(self, method)

    def close(self) -> None:
        self._file.close()


@dataclass
class _JsonlRun:
    tracker: JsonlTracker
    method: str

    def on_round(self, round: int, metrics: dict[str, float]) -> None:
        self.tracker._write({"method": self.method, "event": "round", "round": round, **metrics})

    def finish(self, summary: dict) -> None:
        self.tracker._write({"method": self.method, "event": "finish", **summary})


# ---- TensorBoard -------------------------------------------------------------------------------------
class TensorBoardTracker:
    """DIR/<method>/: one TensorBoard run per method (scalars by tag, the round as the step); the
    configuration as text. Needs the `tensorboard` package (torch.utils.tensorboard's writer)."""

    def __init__(self, log_dir: str | Path):
        self.log_dir = Path(log_dir)
        self._writers: list = []

    def start(self, method: str, params: dict) -> RoundTracker:
        from torch.utils.tensorboard import SummaryWriter

        try:
            writer = SummaryWriter(log_dir=str(self.log_dir / _safe_name(method)))
        except OSError as e:
            raise FedcondError(f"--track tensorboard: cannot write to {self.log_dir}: {e.strerror or e}") from None
        writer.add_text("params", "    " + json.dumps(params, sort_keys=True, indent=1).replace("\n", "\n    "))
        self._writers.append(writer)
        return _TensorBoardRun(writer)

    def close(self) -> None:
        for w in self._writers:
            w.close()


@dataclass
class _TensorBoardRun:
    writer: object

    def on_round(self, round: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, round)  # type: ignore[attr-defined]
        self.writer.flush()  # type: ignore[attr-defined]

    def finish(self, summary: dict) -> None:
        for key, value in summary.items():
            if isinstance(value, (int, float)):
                self.writer.add_scalar(f"final/{key}", value, 0)  # type: ignore[attr-defined]
        self.writer.flush()  # type: ignore[attr-defined]


def _safe_name(method: str) -> str:
    """A method name (`Gossip(independent_init=true)`) as one folder name."""
    return "".join(c if c.isalnum() or c in "-_.+=,()" else "_" for c in method)


# ---- MLflow ------------------------------------------------------------------------------------------
class MlflowTracker:
    """One MLflow run per method in the experiment `fedcond`, at a tracking URI (e.g. sqlite:///mlflow.db
    or http://host:5000): parameters flattened, metrics by round as the step. Needs mlflow-skinny
    (and SQLAlchemy and alembic for a sqlite:/// store; MLflow 3 refuses a plain folder by default)."""

    EXPERIMENT = "fedcond"

    def __init__(self, uri: str):
        from mlflow.tracking import MlflowClient

        try:
            self.client = MlflowClient(tracking_uri=uri)
            found = self.client.get_experiment_by_name(self.EXPERIMENT)
            self.experiment_id = found.experiment_id if found else self.client.create_experiment(self.EXPERIMENT)
        except Exception as e:  # the user's URI: MLflow raises its own kinds (MlflowException, OSError, ...)
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise FedcondError(f"--track mlflow: cannot use tracking URI {uri}: {first}") from None

    def start(self, method: str, params: dict) -> RoundTracker:
        run = self.client.create_run(self.experiment_id, run_name=method)
        for key, value in _flatten(params).items():
            self.client.log_param(run.info.run_id, key, value)
        return _MlflowRun(self.client, run.info.run_id)

    def close(self) -> None:
        pass  # every run is ended by its finish()


@dataclass
class _MlflowRun:
    client: object
    run_id: str

    def on_round(self, round: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.client.log_metric(self.run_id, key, value, step=round)  # type: ignore[attr-defined]

    def finish(self, summary: dict) -> None:
        for key, value in summary.items():
            if isinstance(value, (int, float)):
                self.client.log_metric(self.run_id, f"final_{key}", value)  # type: ignore[attr-defined]
        status = "FINISHED" if summary.get("status") == "ok" else "FAILED"
        self.client.set_terminated(self.run_id, status=status)  # type: ignore[attr-defined]


def _flatten(params: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in params.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = str(value)
    return out


# ---- choosing them from the command line -------------------------------------------------------------
@dataclass(frozen=True)
class TrackSpec:
    kind: str
    target: str


KINDS = {
    # kind -> (module it needs, the optional extra that installs it)
    "jsonl": (None, None),
    "tensorboard": ("tensorboard", "tensorboard"),
    "mlflow": ("mlflow", "mlflow"),
}
TRACK_HELP = (
    "also write each method's per-round metrics (train_loss; accuracy on --eval-every rounds) to a tracker: "
    "jsonl:FILE (JSON lines), tensorboard:DIR (one run per method; extra fedcond[tensorboard]) or "
    "mlflow:URI (e.g. mlflow:sqlite:///mlflow.db; extra fedcond[mlflow]); repeat for several"
)


def parse_track(text: str) -> TrackSpec:
    """`KIND:TARGET`, its back-end installed; a ValueError (one line) otherwise."""
    kind, sep, target = text.partition(":")
    if not sep or not target.strip() or kind not in KINDS:
        raise ValueError(f"expected {', '.join(f'{k}:...' for k in KINDS)}, got '{text}'")
    module, extra = KINDS[kind]
    if module is not None and importlib.util.find_spec(module) is None:
        raise ValueError(f"--track {kind} needs the {module} package: pip install 'fedcond[{extra}]'")
    return TrackSpec(kind, target)


def make_tracker(spec: TrackSpec) -> Tracker:
    if spec.kind == "jsonl":
        return JsonlTracker(spec.target)
    if spec.kind == "tensorboard":
        return TensorBoardTracker(spec.target)
    return MlflowTracker(spec.target)


class Trackers:
    """Every tracker of a command, fed per method: started at the method's first round, finished
    with its result. Used as a context manager, so files are closed however the command ends."""

    def __init__(self, specs: list[TrackSpec], params: dict):
        self.params = params
        self.trackers: list[Tracker] = []
        self.runs: dict[str, list[RoundTracker]] = {}
        try:
            for s in specs:
                self.trackers.append(make_tracker(s))
        except BaseException:
            self.close()
            raise

    def _runs(self, method: str) -> list[RoundTracker]:
        if method not in self.runs:
            self.runs[method] = [t.start(method, {**self.params, "method": method}) for t in self.trackers]
        return self.runs[method]

    def on_round(self, method: str, round: int, metrics: dict[str, float]) -> None:
        for run in self._runs(method):
            run.on_round(round, metrics)

    def finish(self, method: str, summary: dict) -> None:
        for run in self._runs(method):
            run.finish(summary)

    def close(self) -> None:
        for t in self.trackers:
            t.close()

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
