"""`fedcond flower ...`: federated runs over Flower (simulation engine, or the run config for a SuperLink),
and the certificates and keys of a test federation."""

from __future__ import annotations

import json
import sys


CUSTOM_LOSS = ("FedProc",)  # jobs that carry their own local loss, which the wire cannot send (JDFL's neither)


def flower_methods() -> list[str]:
    """The registry's methods that run over Flower: federated, blind to the true clusters, and
    trained with the standard local loss. `Conditional` is also taken, as Conditional-FedAvg."""
    from ..algorithms import ALGORITHMS

    return [n for n, cls in ALGORITHMS.items() if cls.federated and not cls.needs_truth and n not in CUSTOM_LOSS]


def add_parser(sub, positive_int) -> None:
    from ..stats import STATISTICS

    fl = sub.add_parser("flower", help="real federated runs over Flower (needs the flower extra)")
    fl_sub = fl.add_subparsers(dest="flower_command", required=True)
    for name, text in (
        ("simulate", "run one method on Flower's simulation engine, one simulated SuperNode per client"),
        ("run-config", "print the FlowerRun JSON that a SuperLink deployment passes as run config 'fedcond-run'"),
    ):
        p = fl_sub.add_parser(name, help=text)
        p.add_argument("--experiment", required=True, help="a registry name, e.g. E1/mnist/K=2/rich")
        p.add_argument(
            "--method",
            required=True,
            help=f"a federated method: {', '.join(flower_methods())}; Conditional runs as Conditional-FedAvg",
        )
        p.add_argument("--rounds", type=positive_int, help="rounds (default: epochs / local epochs)")
        p.add_argument(
            "--epochs", type=positive_int, help="passes over the data (default: the experiment's preset; 20 for paper)"
        )
        p.add_argument("--local-epochs", type=positive_int, help="local epochs per round (default 1)")
        p.add_argument("--fraction", type=float, default=1.0, help="keep this share of every split (default 1)")
        p.add_argument(
            "--normalisation",
            choices=["secure-zscore", "log"],
            default="secure-zscore",
            help="Conditional's statistics: z-score from a masked secure sum (default) or log(1+v) per client",
        )
        p.add_argument(
            "--statistic", help=f"what Conditional receives: {' or '.join(STATISTICS)} (default eigenvalues)"
        )
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--data-dir")
        p.add_argument(
            "--min-replies", type=positive_int, default=1, help="a round with fewer replying clients stops the run"
        )
        p.add_argument("--reply-timeout", type=float, default=600.0, help="seconds a round waits for replies")
        p.add_argument("--checkpoint", help="resume from this file if present; written after every round")
        p.add_argument("--dp-noise", type=float, help="DP-SGD (Opacus): noise multiplier; enables DP")
        p.add_argument("--dp-clip", type=float, default=1.0, help="DP-SGD per-sample clipping norm (default 1)")
        p.add_argument("--dp-delta", type=float, default=1e-5, help="delta for the reported epsilon (default 1e-5)")
        p.add_argument(
            "--plugin",
            action="append",
            default=[],
            metavar="MODULE",
            help="import this module first (repeatable): it registers its own methods, models or statistics; "
            "the simulated SuperNodes import it too (a deployment's parties list theirs in $FEDCOND_PLUGINS)",
        )
        if name == "simulate":
            p.add_argument("--workers", type=positive_int, default=1, help="Ray actors, one CPU each (default 1)")
            p.add_argument("--json", action="store_true", help="print the result as JSON")
    keys = fl_sub.add_parser(
        "keys",
        help="make a test federation's CA, SuperLink certificate, SuperNode authentication "
        "keys and the secure sum's identities and roster (docs/flower.md, Deployment)",
    )
    keys.add_argument("--out", required=True, help="a new or empty folder; nothing is ever overwritten")
    keys.add_argument("--nodes", type=positive_int, required=True, help="SuperNodes, one per client")
    keys.add_argument(
        "--host",
        action="append",
        default=[],
        help="another name or IP address SuperNodes reach the SuperLink by (repeatable; localhost and "
        "127.0.0.1 are always in its certificate)",
    )


def flower_command(args) -> int:
    from ..flower import require_flwr

    require_flwr()
    if args.flower_command == "keys":
        return keys_command(args)
    import torch

    torch.set_num_threads(1)
    run = make_run(args)
    if args.flower_command == "run-config":
        print(run.to_json())
        return 0
    from ..flower.simulation import simulate
    from ..plugin_loading import export_plugins

    export_plugins(args.plugin)  # the Ray actors that play the SuperNodes import them by themselves
    result = simulate(run, workers=args.workers)
    if args.json:
        print(json.dumps(result))
    else:
        eps = f", epsilon {result['epsilon']:.2f} at delta {result['delta']:g}" if result["epsilon"] is not None else ""
        print(
            f"{result['method']} over Flower on {run.experiment}: accuracy {result['accuracy']:.4f} "
            f"(± {result['accuracy_std']:.4f} over clients, weighted {result['weighted_accuracy']:.4f}), "
            f"{result['rounds']} rounds, {result['seconds']:.1f} s{eps}"
        )
        if result["dropped"]:
            print(f"dropped replies: {result['dropped']}", file=sys.stderr)
    return 0


def keys_command(args) -> int:
    from pathlib import Path

    from ..errors import FedcondError
    from ..flower.keys import make_federation_keys

    if not args.out.strip():
        raise FedcondError("--out must name a folder")
    keys = make_federation_keys(Path(args.out), args.nodes, tuple(args.host))
    print(
        f"{keys.folder}: ca.crt, superlink.crt + superlink.key, roster.json, and node-0 .. node-{args.nodes - 1} "
        f"(auth.key, auth.pub, secagg-identity.hex); what goes where: docs/flower.md, Deployment"
    )
    return 0


def make_run(args):
    from ..errors import FedcondError
    from ..experiments import EXPERIMENTS, PROTOCOLS, select
    from ..flower.config import DPConfig, FlowerRun

    if args.experiment not in EXPERIMENTS:
        select(args.experiment)  # the registry's error, with the closest names
        raise FedcondError(f"--experiment takes one exact name, e.g. {select(args.experiment)[0].name}")
    if not 0.0 < args.fraction <= 1.0:
        raise FedcondError(f"--fraction must be in (0, 1], got {args.fraction}")
    exp = EXPERIMENTS[args.experiment]
    from ..algorithms import ALGORITHMS, make_algorithm, resolve_methods

    method = resolve_methods(args.method)[0] if "," not in args.method else args.method
    if method == "Conditional":  # the paper's pooled Conditional has one federated form: FedAvg rounds on (x, s_i)
        method = "Conditional-FedAvg"
    alg = make_algorithm(method, num_clusters=exp.k)
    if not alg.federated or alg.needs_truth:
        raise FedcondError(
            f"{method} trains on pooled data or needs the true clusters; over Flower use one of "
            f"{', '.join(flower_methods())}"
        )
    if "+" in method or type(alg) in {ALGORITHMS[n] for n in CUSTOM_LOSS}:  # the wire cannot send a custom loss
        raise FedcondError(
            f"{method}: custom local losses (FedProc, JDFL) do not run over Flower yet; use fedcond run or sweep"
        )
    spec = exp.spec(seed=args.seed, data_dir=args.data_dir, fraction=args.fraction)
    protocol = PROTOCOLS[exp.preset][0].replace(
        epochs=args.epochs, local_epochs=args.local_epochs, statistic=args.statistic
    )
    dp = DPConfig(args.dp_noise, args.dp_clip, args.dp_delta) if args.dp_noise is not None else None
    if dp is not None and not alg.plain_jobs():  # said here, not by every client mid-round
        private = [n for n in flower_methods() if make_algorithm(n, num_clusters=exp.k).plain_jobs()]
        raise FedcondError(
            f"{method}: DP-SGD privatises plain local SGD only, and this method's jobs carry a regulariser, "
            f"a custom loss or its momentum (carry_momentum); DP runs {', '.join(private)}"
        )
    fed = spec.build().federation
    clients = fed.num_clients  # one SuperNode per client
    if dp is not None:
        from ..flower.dp import model_refusal
        from ..models import ModelSpec

        why = model_refusal(ModelSpec(fed.input_shape, fed.num_classes).build())
        if why is not None:
            raise FedcondError(
                f"{exp.name}: DP-SGD cannot train its model ({why}); the MNIST and light CNNs can (no batch norm)"
            )
    return FlowerRun(
        spec=spec,
        method=method,
        clients=clients,
        protocol=protocol,
        rounds=args.rounds,
        seed=args.seed,
        normalisation=args.normalisation,
        min_replies=args.min_replies,
        reply_timeout=args.reply_timeout,
        checkpoint=args.checkpoint,
        dp=dp,
        experiment=exp.name,
    )
