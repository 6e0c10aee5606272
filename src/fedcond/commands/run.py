"""`fedcond run`: train methods on one scenario, print a table, save every result as it finishes."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import sys

from tqdm import tqdm

from .. import results
from ..errors import EXIT_INCOMPLETE, FedcondError
from ..algorithms import resolve_methods
from ..run import Failure, default_workers, needs_missing_truth, rounds_of, run_methods
from ..scenarios import ScenarioSpec
from ..tracking import Trackers


def scenario_spec(args, default_k: int) -> ScenarioSpec:
    """The scenario that the command line's --scenario/--dataset/--k/... arguments name."""
    k = args.k
    if k is None and args.groups and "|" in args.groups and args.family.lower() == "e1":  # E1: one cluster per group
        k = args.groups.count("|") + 1
    from ..scenarios.families import STANDARD

    no_default_k = args.family.lower() in ("domain", *STANDARD)  # domain: one cluster per domain
    return ScenarioSpec(
        family=args.family,
        dataset=args.dataset,
        k=k if k is not None or no_default_k else default_k,
        clients_per_cluster=args.clients_per_cluster,
        clients=args.clients,
        rotations=args.rotations,
        seed=args.seed,
        data_dir=args.data_dir,
        groups=args.groups,
        alpha=args.alpha,
        shards=args.shards,
        sigma=args.sigma,
        samples=args.samples,
    )


def run_command(args) -> int:
    from ..engine import check_device

    check_device(args.device)
    methods = resolve_methods(args.methods)
    from ..experiments import PROTOCOLS, select

    experiment = None
    if args.experiment:
        matches = [e for e in select(args.experiment) if e.name == args.experiment]
        if not matches:
            raise FedcondError(f"--experiment takes one exact name, e.g. {select(args.experiment)[0].name}")
        experiment = matches[0]
    preset = args.protocol or (experiment.preset if experiment else "paper")
    fraction = PROTOCOLS[preset][1]  # smoke: a stratified 5% of every split
    protocol = PROTOCOLS[preset][0].replace(
        epochs=args.epochs,
        local_epochs=args.local_epochs,
        lr=args.lr,
        momentum=args.momentum,
        conditioning=args.conditioning,
        stats_normalisation=args.stats_normalisation,
        encoder_source=args.encoder_source,
        statistic=args.statistic,
        holdout_clients=args.holdout_clients,
        eval_every=args.eval_every,
        precision=args.precision,
        model=args.model,
        inputs=args.inputs,
        drop_last=args.drop_last,
    )
    from ..engine.precision import check_supported

    check_supported(protocol.precision, args.device.split(":")[0])  # bf16: CPUs that have it
    protocol_name = None
    if experiment:
        from ..experiments import PROTOCOL_OPTIONS, SCENARIO_OPTIONS, cell_changes, variant_name

        spec = experiment.spec(args.seed, args.data_dir, fraction, groups=args.groups)
        if args.groups is not None and spec.groups is None:
            raise FedcondError(f"--groups applies to E1 and E2a only, not to {experiment.family}")
        # named as a sweep names the same cell, so sweeps skip it and reports never mix it with another
        changes = {
            k: v
            for k, v in dataclasses.asdict(protocol).items()
            if k in PROTOCOL_OPTIONS and v != getattr(PROTOCOLS[preset][0], k)
        }
        changes.update({k: getattr(args, k) for k in SCENARIO_OPTIONS if getattr(args, k) is not None})
        protocol_name = variant_name(preset, cell_changes(experiment, changes))
    else:
        spec = dataclasses.replace(scenario_spec(args, default_k=5), fraction=fraction)
    refused = [m for m in methods if needs_missing_truth(spec.family, m)]
    if refused:
        raise FedcondError(
            f"{', '.join(refused)} needs the true clusters, and a {spec.family} federation has none; "
            "leave it out of --methods"
        )
    scenario = spec.build()  # fails fast, with a clear message, before any worker starts
    fed = scenario.federation
    trackers = Trackers(  # before anything trains: a tracker that cannot open is one line and exit 2
        args.track or [],
        {"scenario": spec.describe(), "protocol": dataclasses.asdict(protocol), "seed": args.seed},
    )
    con = results.connect(args.db)
    total = sum(rounds_of(m, protocol) for m in methods)
    if not args.json:  # before the bar, which would otherwise carry it on its line
        print(
            f"{fed.family} on {fed.dataset}: {fed.num_clients} clients, {_clusters(scenario.truth)}; "
            f"{protocol.epochs} epochs; methods {', '.join(methods)}",
            file=sys.stderr,
        )
    if args.device == "cpu":  # a first run compiles and times the kernels here, saying so, not inside epoch 1
        from ..models import cpu_kernels

        cpu_kernels.extension()
    bar = tqdm(total=total, unit="epoch", desc=f"{fed.family}/{fed.dataset}", disable=args.no_progress, file=sys.stderr)
    out, failed = [], []
    workers = args.workers or default_workers()
    try:
        for res in run_methods(
            spec,
            methods,
            protocol,
            args.seed,
            workers,
            on_round=lambda m, r: bar.update(1),
            device=args.device,
            scenario=scenario,
            failures="return",
            on_metrics=trackers.on_round if trackers.trackers else None,
        ):
            error = res.reason if isinstance(res, Failure) else None  # e.g. diverged: recorded, and the others go on
            row = results.run_row(
                family=fed.family,
                dataset=fed.dataset,
                scenario=spec.describe(),
                method=res.method,
                seed=args.seed,
                protocol=protocol.as_record(),
                result=None if error else res,
                device=args.device,
                experiment=experiment.name if experiment else None,
                protocol_name=protocol_name,
                status="failed" if error else "ok",
                error=error,
                hyperparameters=res.hyperparameters,
            )
            try:
                row["id"] = results.save_row(con, row)
            except sqlite3.IntegrityError:
                raise FedcondError(
                    f"{experiment.name} {res.method} seed {args.seed} [{protocol_name}] is already in "
                    f"{args.db or results.default_db_path()}; use another --db or --seed"
                ) from None
            out.append((res, row))
            trackers.finish(res.method, _summary(row))
            if error:
                failed.append(res)
                bar.write(f"  {res.method}: FAILED: {error}", file=sys.stderr)
            else:
                bar.write(f"  {res.method}: accuracy {res.accuracy:.4f} ({res.seconds:.1f} s)", file=sys.stderr)
    finally:
        bar.close()
        con.close()
        trackers.close()
    out.sort(key=lambda item: methods.index(item[0].method))
    if args.json:
        print(json.dumps({"results": [_as_json(res, row) for res, row in out]}))
    else:
        _print_table(out, protocol)
    print(f"fedcond: {len(out)} row(s) saved to {args.db or results.default_db_path()}", file=sys.stderr)
    if failed:
        print(
            f"fedcond: {len(failed)} of {len(methods)} methods failed (recorded as failed): "
            + "; ".join(f"{f.method}: {f.reason}" for f in failed),
            file=sys.stderr,
        )
        return EXIT_INCOMPLETE
    return 0


def _clusters(truth) -> str:
    if not truth.known:
        return "no true clusters"
    return f"{truth.num_clusters} cluster{'s' if truth.num_clusters != 1 else ''}"


def _summary(row: dict) -> dict:
    """A finished run as its trackers record it: the row's id, status and final numbers, or its error."""
    keys = ("id", "status", "error") if row["status"] != "ok" else ("id", "status", "accuracy", "weighted_accuracy")
    return {k: row[k] for k in (*keys, "seconds") if row.get(k) is not None}


def _as_json(res, row: dict) -> dict:
    """Everything the database row holds (configuration, extra: ARI, curve, unseen accuracy; versions,
    git revision, row id), the unseen accuracy also at the top as before, and the final training loss."""
    extra = row["extra"]
    unseen = {k: extra[k] for k in ("unseen_accuracy", "unseen_per_client") if k in extra}
    return {**row, **unseen, **({"train_loss": res.train_loss} if row["status"] == "ok" else {})}


def _print_table(out: list, protocol) -> None:
    held = protocol.holdout_clients > 0
    print(
        f"{'method':20s} {'accuracy':>9s} {'± clients':>9s} {'weighted':>9s} {'seconds':>8s}"
        + (f" {'unseen':>9s}" if held else "")
    )
    for r, row in out:
        if row["status"] != "ok":
            print(f"{r.method:20s} FAILED: {r.reason}")
            continue
        unseen = (
            (f" {r.extra['unseen_accuracy']:9.4f}" if "unseen_accuracy" in r.extra else f" {'n/a':>9s}") if held else ""
        )
        print(
            f"{r.method:20s} {r.accuracy:9.4f} {r.accuracy_std:9.4f} "
            f"{r.weighted_accuracy:9.4f} {r.seconds:8.1f}{unseen}"
        )
    if held:
        print(
            f"(accuracy: the training clients'; unseen: {protocol.holdout_clients} client(s) per cluster held out of "
            "training; n/a: the method has no model for a newcomer)"
        )
