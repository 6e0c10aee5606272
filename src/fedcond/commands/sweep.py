"""`fedcond sweep`: every (experiment, method, seed) not yet in the results database, or with
`--dry-run` the plan and its expected time on this kind of machine."""

from __future__ import annotations

import json
import sys

from ..errors import EXIT_INCOMPLETE, FedcondError


def dry_run(cells, db, data_dir=None, resumes: bool = True, on_ray: bool = False) -> int:
    """Every cell the sweep would run, marked done where the database holds it, with the time a
    cell to run is expected to take on this kind of machine (estimate.Estimator; for a cell a
    checkpoint resumes, the share of its rounds left); nothing runs."""
    from .. import results
    from ..estimate import Estimator
    from ..sweep import resumable

    con = results.connect(db)
    try:
        done = results.finished_cells(con)
        estimator = Estimator(con)
        expected = [estimator.seconds(c) if c.key not in done else None for c in cells]
    finally:
        con.close()
    resuming = resumable([c for c in cells if c.key not in done], db, data_dir) if resumes else {}
    for k, c in enumerate(cells):
        state, sec, note = "done" if c.key in done else "todo", expected[k], ""
        if c.key in resuming:
            rounds_done, total = resuming[c.key][0], c.rounds
            note = f"  resumes after round {rounds_done} of {total}"
            if sec is not None:
                sec = expected[k] = sec * (total - rounds_done) / total
        eta = f"  ~{sec / 60:.0f} min" if state == "todo" and sec is not None else ""
        print(f"{state}  {c.experiment.name}  {c.method}  seed {c.seed}  [{c.protocol_name}]{note}{eta}")
    todo = [sec for c, sec in zip(cells, expected) if c.key not in done]
    known = [sec for sec in todo if sec is not None]
    summary = (
        f"{len(cells)} cells: {len(cells) - len(todo)} already in {db or results.default_db_path()}, {len(todo)} to run"
    )
    if known:
        unknown = len(todo) - len(known)
        summary += (
            f" (~{sum(known) / 3600:.1f} core-hours at the recorded times of like cells, CPU time where recorded"
            + (f"; {unknown} with no like cell recorded" if unknown else "")
            + ")"
        )
    print(summary)
    if known:  # on Ray the cells run on the cluster's nodes, which this machine's kind may not describe
        print(
            estimator.basis()
            + ("; --ray runs the cells on the cluster's nodes, perhaps of other kinds" if on_ray else "")
        )
    return 0


def sweep_command(args) -> int:
    from ..experiments import PROTOCOL_OPTIONS, SCENARIO_OPTIONS, select, variant_name
    from ..experiments import protocol as protocol_of
    from ..sweep import plan, run_sweep, skipped_for_truth

    seeds = args.seeds  # a list (_seed_list)
    changes = {k: getattr(args, k) for k in PROTOCOL_OPTIONS + SCENARIO_OPTIONS if getattr(args, k) is not None}
    experiments = select(args.pattern)
    for preset in {args.protocol} if args.protocol else {e.preset for e in experiments}:
        protocol_of(variant_name(preset, {k: v for k, v in changes.items() if k in PROTOCOL_OPTIONS}))  # validates
    if changes and any(e.kind == "study" for e in experiments):
        raise FedcondError("the earlier study's cells (MCDC/*) take no protocol options")
    if args.groups is not None and not any(e.family in ("E1", "E2a") and e.dataset != "cifar100" for e in experiments):
        raise FedcondError("--groups applies to E1 and E2a experiments only (not CIFAR-100's fixed superclasses)")
    cells = plan(
        experiments, args.methods, seeds, args.protocol, changes
    )  # checks every option against every experiment
    skipped = skipped_for_truth(experiments, args.methods)
    if skipped:
        pairs = "; ".join(f"{m} on {e}" for e, m in skipped[:5]) + (" ..." if len(skipped) > 5 else "")
        print(f"fedcond: {len(skipped)} pair(s) left out (no true clusters in the scenario): {pairs}", file=sys.stderr)
    if not args.dry_run and args.ray is None:  # refused here, in one line, before any cell starts
        from ..engine.precision import check_supported

        for name in dict.fromkeys(c.protocol_name for c in cells):
            check_supported(protocol_of(name)[0].precision)
    if args.dry_run:
        # --ray sweeps and --checkpoint-every 0 start every cell afresh
        return dry_run(
            cells,
            args.db,
            args.data_dir,
            resumes=args.ray is None and args.checkpoint_every is not None,
            on_ray=args.ray is not None,
        )
    counts = run_sweep(
        cells,
        args.db,
        args.data_dir,
        args.workers,
        progress=not args.no_progress,
        ray_address=args.ray,
        checkpoint_every=args.checkpoint_every,
    )
    print(json.dumps(counts))
    if counts.get("unavailable"):  # asked for, not run: the caller must not take the sweep for complete
        print(
            f"fedcond: {counts['unavailable']} cell(s) could not run (reasons above; a rerun retries them): "
            + "; ".join(counts["not_run"]),
            file=sys.stderr,
        )
        return EXIT_INCOMPLETE
    return 0
