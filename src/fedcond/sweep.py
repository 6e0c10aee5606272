"""Sweeps: every (experiment, method, seed, protocol) cell not yet in the results database.

Each finished cell is one row, committed in its own transaction the moment it finishes, and a
unique index on the cell makes a duplicate impossible: killing the sweep at any moment (SIGKILL
included) loses at most the cells in flight, and rerunning skips every recorded cell. A run that
diverges is recorded as failed with its reason, and the sweep goes on. Several sweeps may share one
database (more machines or cores): a cell another sweep recorded meanwhile is skipped, before it
starts where possible, else when its row would be the second.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tqdm import tqdm

from . import results
from .algorithms import resolve_methods
from .checkpoint import EVERY_SECONDS
from .errors import FedcondError
from .experiments import Experiment, protocol, scenario_options
from .run import Failure, checkpoint_for, default_workers, needs_missing_truth, rounds_of, run_methods


@dataclass(frozen=True)
class Cell:
    experiment: Experiment
    method: str
    seed: int
    protocol_name: str

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.experiment.name, self.method, self.seed, self.protocol_name)

    @property
    def rounds(self) -> int:
        """Rounds this cell trains for under its protocol."""
        return rounds_of(self.method, protocol(self.protocol_name)[0])

    def setup(self, data_dir):
        """(scenario spec, protocol) this cell runs with: its preset's, and the options its name carries."""
        proto, fraction = protocol(self.protocol_name)
        return self.experiment.spec(self.seed, data_dir, fraction, **scenario_options(self.protocol_name)), proto


def plan(
    experiments: list[Experiment],
    methods: str | None,
    seeds: list[int],
    protocol_name: str | None,
    changes: dict | None = None,
) -> list[Cell]:
    """Every (experiment, method, seed) cell, once. `changes`: options on top of the preset
    `protocol_name` (None: each experiment's own, `paper` or `jdfl`), named per experiment by the
    ones that apply to it (experiments.cell_changes). A method that needs true clusters has no cell
    on an experiment without them (`skipped_for_truth` names those pairs)."""
    from .experiments import cell_changes, variant_name

    cells = []
    seeds = list(dict.fromkeys(seeds))
    for exp in experiments:
        preset = protocol_name or exp.preset
        pname = variant_name(preset, cell_changes(exp, changes)) if changes else preset
        if exp.kind == "study":  # the study's own method names (linear, ensemble, ..., global, cluster, client)
            names = [m for m in exp.methods if not methods or m in {s.strip() for s in methods.split(",")}]
        else:
            names = resolve_methods(methods) if methods else list(exp.methods)
        names = [m for m in dict.fromkeys(names) if not needs_missing_truth(exp.family, m)]  # Oracle on dirichlet
        for seed in seeds:
            cells += [Cell(exp, m, seed, pname) for m in names]
    return cells


def skipped_for_truth(experiments: list[Experiment], methods: str | None) -> list[tuple[str, str]]:
    """(experiment, method) pairs `plan` leaves out: the method needs true clusters the experiment has not."""
    out = []
    for exp in experiments:
        if exp.kind != "train":
            continue
        names = resolve_methods(methods) if methods else list(exp.methods)
        out += [(exp.name, m) for m in dict.fromkeys(names) if needs_missing_truth(exp.family, m)]
    return out


RECORDED_ELSEWHERE = "recorded meanwhile by another process; skipped"


def _record(con, cell: Cell, spec, proto, res, counts: dict, ran_with: dict | None = None) -> str:
    """Write one finished cell (its own transaction) and say how it went; ran_with: the versions where
    it computed, if elsewhere (results.save_run). A cell another sweep on the database recorded while
    this one computed it keeps that row (the unique index refuses the second) and counts as skipped."""
    exp = cell.experiment
    error = res.reason if isinstance(res, Failure) else None
    try:
        results.save_run(
            con,
            family=exp.family,
            dataset=exp.dataset,
            scenario=spec.describe(),
            method=res.method,
            seed=cell.seed,
            protocol=proto.as_record(),
            result=None if error else res,
            experiment=exp.name,
            protocol_name=cell.protocol_name,
            status="failed" if error else "ok",
            error=error,
            hyperparameters=res.hyperparameters,
            ran_with=ran_with,
        )
    except sqlite3.IntegrityError:
        if cell.key not in results.finished_cells(con):
            raise  # not the cell's unique index: a real bug
        counts["skipped"] += 1
        return RECORDED_ELSEWHERE
    counts["failed" if error else "ran"] += 1
    return f"FAILED: {error}" if error else f"accuracy {res.accuracy:.4f}"


def _not_run(counts: dict, group: list[Cell]) -> None:
    """Count cells that could not start (data missing or damaged): not recorded, so a rerun retries
    them; `not_run` names them for the caller's summary."""
    c = group[0]
    counts["unavailable"] = counts.get("unavailable", 0) + len(group)
    counts.setdefault("not_run", []).append(
        f"{c.experiment.name} {','.join(g.method for g in group)} seed {c.seed} [{c.protocol_name}]"
    )


def _drop_recorded_meanwhile(con, group: list[Cell], counts: dict, log) -> list[Cell]:
    """The cells of `group` still to run: another sweep on the database may have recorded some since
    this one planned."""
    done = results.finished_cells(con)
    for c in group:
        if c.key in done:
            counts["skipped"] += 1
            log(f"  {c.experiment.name} {c.method} seed {c.seed} [{c.protocol_name}]: {RECORDED_ELSEWHERE}")
    return [c for c in group if c.key not in done]


def checkpoint_dir(db: str | None) -> Path:
    """Where a sweep's runs keep their progress: beside the database (`paper.sqlite.checkpoints/`)."""
    path = Path(db) if db else results.default_db_path()
    return path.with_name(path.name + ".checkpoints")


@dataclass(frozen=True)
class _Options:
    """How a sweep runs its cells (run_sweep's arguments), handed to each kind's runner."""

    db: str | None
    data_dir: str | None
    workers: int
    progress: bool
    ray_address: str | None
    checkpoint_every: float | None


def run_sweep(
    cells: list[Cell],
    db: str | None,
    data_dir: str | None = None,
    workers: int | None = None,
    progress: bool = True,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
    ray_address: str | None = None,
    checkpoint_every: float | None = EVERY_SECONDS,
) -> dict:
    """Run every cell not in `db`; returns counts {planned, skipped, ran, failed}, and {unavailable,
    not_run} where cells could not start (their names in not_run).

    ray_address: spread cells over a Ray cluster ("local", "auto" or an address) instead of local processes.
    checkpoint_every: seconds between a run's checkpoints (fedcond.checkpoint; None: none), so a
    stopped sweep resumes its cells in flight from their last checkpoint, not from the start.
    """
    con = results.connect(db)
    done = results.finished_cells(con)
    todo = [c for c in cells if c.key not in done]
    counts = {"planned": len(cells), "skipped": len(cells) - len(todo), "ran": 0, "failed": 0}
    if checkpoint_every is not None and checkpoint_every <= 0:
        checkpoint_every = None
    _remove_finished_checkpoints([c for c in cells if c.key in done], db, data_dir)
    log(
        f"sweep: {len(cells)} cells, {counts['skipped']} already "
        f"in {db or results.default_db_path()}, {len(todo)} to run"
    )
    opts = _Options(db, data_dir, workers or default_workers(), progress, ray_address, checkpoint_every)
    try:
        for kind, runner in KINDS.items():
            mine = [c for c in todo if c.experiment.kind == kind]
            if mine:
                runner(con, mine, opts, counts, log)
    finally:
        con.close()
    return counts


def _groups(cells: list[Cell]) -> dict[tuple[str, int, str], list[Cell]]:
    """Cells by (experiment, seed, protocol): one scenario build (or one study call) serves all their methods."""
    groups: dict[tuple[str, int, str], list[Cell]] = {}
    for c in cells:
        groups.setdefault((c.experiment.name, c.seed, c.protocol_name), []).append(c)
    return groups


def _run_training(con, todo: list[Cell], opts: _Options, counts: dict, log) -> None:
    """Train and evaluate: on Ray if asked, else in local processes with a progress bar in rounds."""
    if opts.ray_address is not None:
        _sweep_on_ray(con, todo, opts.data_dir, opts.ray_address, counts, log)
        return
    db, data_dir, checkpoint_every = opts.db, opts.data_dir, opts.checkpoint_every
    # reading checkpoints only serves the progress bar
    resumes = resumable(todo, db, data_dir) if opts.progress and checkpoint_every is not None else {}
    total = sum(c.rounds - resumes.get(c.key, (0, 0.0))[0] for c in todo)
    bar = tqdm(total=total, unit="round", desc="sweep", disable=not opts.progress, file=sys.stderr)
    try:
        for (name, seed, pname), group in _groups(todo).items():
            group = _drop_recorded_meanwhile(con, group, counts, lambda s: bar.write(s, file=sys.stderr))
            if not group:
                continue
            spec, proto = group[0].setup(data_dir)
            methods = [c.method for c in group]
            start = time.perf_counter()
            try:
                by_method = {c.method: c for c in group}
                for res in run_methods(
                    spec,
                    methods,
                    proto,
                    seed,
                    opts.workers,
                    on_round=lambda m, r: bar.update(1),
                    failures="return",
                    checkpoints=None if checkpoint_every is None else checkpoint_dir(db),
                    checkpoint_every=checkpoint_every or EVERY_SECONDS,
                ):
                    acc = _record(con, by_method[res.method], spec, proto, res, counts)
                    bar.write(
                        f"  {name} {res.method} seed {seed} [{pname}]: {acc} (at {time.perf_counter() - start:.0f} s)",
                        file=sys.stderr,
                    )
            except (
                FedcondError
            ) as e:  # the scenario cannot be built (e.g. data missing): not recorded, so a rerun retries
                _not_run(counts, group)
                bar.write(f"  {name} seed {seed} [{pname}]: not run: {e}", file=sys.stderr)
    finally:
        bar.close()


def _checkpoints(cells: list[Cell], db: str | None, data_dir):
    """(cell, its checkpoint) for each training cell, where the database has a checkpoint directory."""
    directory = checkpoint_dir(db)
    if not directory.is_dir():
        return
    for c in cells:
        if c.experiment.kind == "train":
            spec, proto = c.setup(data_dir)
            yield c, checkpoint_for(directory, spec, c.method, proto, c.seed)


def _remove_finished_checkpoints(cells: list[Cell], db: str | None, data_dir) -> None:
    """A recorded cell's checkpoint is left over (a kill between the row and its removal): delete it."""
    for _, ckpt in _checkpoints(cells, db, data_dir):
        ckpt.remove()


def resumable(cells: list[Cell], db: str | None, data_dir=None) -> dict[tuple, tuple[int, float]]:
    """Cell key -> (rounds done, seconds spent) for each cell a sweep on `db` would resume from its
    checkpoint (this code, this environment)."""
    found = {}
    for c, ckpt in _checkpoints(cells, db, data_dir):
        progress = ckpt.progress()
        if progress is not None:
            found[c.key] = progress
    return found


def _run_discovery(con, cells: list[Cell], opts: _Options, counts: dict, log) -> None:
    """JDFL's discovery grid: cheap, local, one training per batch size."""
    from .jdfl.diagnostics import run_cells

    for (name, seed, pname), group in _groups(cells).items():
        spec, proto = group[0].setup(opts.data_dir)
        by_method = {c.method: c for c in group}
        try:
            scenario = spec.build()
            for res in run_cells(scenario, [c.method for c in group], proto, seed, opts.workers):
                _record(con, by_method[res.method], spec, proto, res, counts)
                log(
                    f"  {name} {res.method} seed {seed} [{pname}]: ARI "
                    f"{res.extra['ari']:.3f} (M={res.extra['true_domains']}), "
                    f"elbow M={res.extra['elbow']}"
                )
        except FedcondError as e:
            _not_run(counts, group)
            log(f"  {name} seed {seed} [{pname}]: not run: {e}")


def _sweep_on_ray(con, todo: list[Cell], data_dir, address: str, counts: dict, log) -> None:
    from .ray_backend import run_cells_on_ray

    tasks, meta = [], []
    for c in todo:
        spec, proto = c.setup(data_dir)
        tasks.append((spec, c.method, proto, c.seed))
        meta.append((c, spec, proto))
    for i, res, ran_with in run_cells_on_ray(tasks, address):
        c, spec, proto = meta[i]
        outcome = _record(con, c, spec, proto, res, counts, ran_with)
        log(f"  {c.experiment.name} {c.method} seed {c.seed} [{c.protocol_name}] (ray): {outcome}")


def _run_study(con, cells: list[Cell], opts: _Options, counts: dict, log, device: str = "cpu") -> None:
    """The earlier study's cells (SPEC Part B, `fedcond.study.EXPERIMENTS`): same cells, same
    resume rules; each (experiment, seed, protocol) runs its methods not yet recorded, then records them."""
    from .study import EXPERIMENTS as STUDY
    from .study import record

    for (name, seed, pname), group in _groups(cells).items():
        group = _drop_recorded_meanwhile(con, group, counts, log)
        if not group:
            continue
        exp = STUDY[name]
        todo = tuple(c.method for c in group)
        start = time.perf_counter()
        try:
            res = exp(seed=seed, protocol=pname, methods=todo, data_dir=opts.data_dir, device=device)
        except FedcondError as e:  # e.g. EMNIST missing, or a protocol the study has no preset for
            _not_run(counts, group)
            log(f"  {name} seed {seed} [{pname}]: not run: {e}")
            continue
        res = {m: r for m, r in res.items() if m in todo}  # e.g. 'bayes' is a reference, not a cell
        kept = {c.method for c in _drop_recorded_meanwhile(con, group, counts, log)}
        res = {m: r for m, r in res.items() if m in kept}
        try:
            record(con, exp, res, seed, pname, device)
        except sqlite3.IntegrityError:  # another sweep recorded one in the instant between the check and here
            log(f"  {name} seed {seed} [{pname}]: some cells {RECORDED_ELSEWHERE}")
        counts["ran"] += len(res)
        log(
            f"  {name} seed {seed} [{pname}]: "
            + ", ".join(f"{m} {r.accuracy:.4f}" for m, r in res.items())
            + f" ({time.perf_counter() - start:.0f} s)"
        )


# Who runs a cell, by its experiment's kind (Experiment.kind), in this order: JDFL's discovery grid,
# the earlier study (MCDC/*: its own trainers, one call per experiment, seed and protocol), training.
KINDS: dict[str, Callable] = {"discovery": _run_discovery, "study": _run_study, "train": _run_training}
