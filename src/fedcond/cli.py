"""The command line: the only place that parses arguments. Library errors (FedcondError) become
one line on stderr and exit code 2; nothing else is caught, so real bugs keep their traceback."""

from __future__ import annotations

import argparse
import os
import sys

from .experiments import PROTOCOLS
from .errors import FedcondError

EXIT_USAGE = 2


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {v}")
    return v


# The range of every integer option, by its dest: checked at parse time, so that a value no run can
# use is one line and exit 2 before anything trains, not a traceback at save (a seed SQLite cannot
# store) or a run that never ends. Seeds: sklearn's random_state (k-means, randomised SVD) takes
# 32-bit seeds. Maxima: 500x the paper's 20 epochs / JDFL's 100 rounds, and federations far larger
# than any scenario builds (the builders refuse what their data cannot fill).
SEED_MAX = 2**32 - 1
INT_BOUNDS: dict[str, tuple[int, int]] = {
    "seed": (0, SEED_MAX),
    "epochs": (1, 10_000),
    "local_epochs": (1, 10_000),
    "rounds": (1, 10_000),
    "eval_every": (0, 10_000),
    "k": (1, 1_000),
    "clients_per_cluster": (1, 100_000),
    "clients": (1, 100_000),
    "shards": (1, 100_000),
    "samples": (1, 10_000_000),
    "holdout_clients": (0, 100_000),
    "min_replies": (1, 100_000),
    "workers": (1, 1_024),
    "nodes": (1, 10_000),  # fedcond flower keys: SuperNodes of a test federation
    "row": (1, 2**63 - 1),  # config show: a SQLite row id
    "limit": (1, 10**9),  # fedcond results list: rows shown
    "id": (1, 2**63 - 1),  # fedcond results show: a row id (SQLite's INTEGER)
}


def _int_in(low: int, high: int):
    """An argparse type: a whole number in [low, high]."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
        if not low <= v <= high:
            raise argparse.ArgumentTypeError(f"expected a whole number in [{low}, {high}], got {v}")
        return v

    return parse


def _nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a value, got an empty one")
    return text


def _seed_list(text: str) -> list[int]:
    """sweep --seeds: a comma list of seeds, each in range; at least one."""
    items = [s.strip() for s in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected a comma list of seeds such as 0,1,2, got '{text}'")
    return [_int_in(*INT_BOUNDS["seed"])(s) for s in items]


def _validate_options(parser: argparse.ArgumentParser) -> None:
    """Give every option of every subcommand its check: integers their INT_BOUNDS (an integer option
    without one is a bug, caught by the tests), text a non-empty value (an empty --db or --groups
    was silently the default)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                _validate_options(sub)
        elif action.dest == "seeds":
            action.type = _seed_list
        elif action.type in (int, _positive_int):
            if action.dest not in INT_BOUNDS:
                raise AssertionError(
                    f"integer option {action.option_strings or action.dest} has no range in INT_BOUNDS"
                )
            action.type = _int_in(*INT_BOUNDS[action.dest])
        elif action.type is None and action.nargs != 0 and action.choices is None:
            action.type = _nonempty


def _seconds_or_off(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got '{text}'") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds >= 0 (0: off), got {text}")
    return v or None


def _float_in(low: float, high: float, low_open: bool = False):
    """An argparse type: a float in [low, high), or (low, high) when low_open."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
        if not (low < v if low_open else low <= v) or not v < high:
            raise argparse.ArgumentTypeError(
                f"expected a number in {'(' if low_open else '['}{low:g}, {high:g}), got {text}"
            )
        return v

    return parse


def _add_protocol_args(p: argparse.ArgumentParser) -> None:
    """The protocol options, the same on run and sweep (a sweep records them in the cell's name)."""
    p.add_argument(
        "--epochs", type=_positive_int, help="passes over the data (default: the preset's; paper 20, jdfl its rounds)"
    )
    p.add_argument("--local-epochs", type=_positive_int, help="federated methods: local epochs per round (default 1)")
    p.add_argument(
        "--lr", type=_float_in(0, float("inf"), low_open=True), help="local SGD learning rate (default 0.01)"
    )
    p.add_argument("--momentum", type=_float_in(0, 1), help="local SGD momentum (default 0.9; reset every round)")
    p.add_argument("--conditioning", choices=["concat", "film"], help="how Conditional takes s (default concat)")
    p.add_argument("--stats-normalisation", choices=["zscore", "log", "none"], help="default zscore (the paper's)")
    p.add_argument(
        "--encoder-source",
        choices=["cifar100", "cifar10", "pacs32"],
        help="CIFAR statistics: the cross-trained encoder to use (default: the other CIFAR, as in the paper)",
    )
    p.add_argument("--statistic", help="what conditioned models receive (default eigenvalues): " + _statistics_help())
    p.add_argument(
        "--eval-every",
        type=int,
        help="evaluate every N rounds: the accuracy curve and the best round are "
        "stored with the row (default 0: after the last round only)",
    )
    p.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        help="local SGD arithmetic: fp32 (default, the paper's) or bf16 (autocast, fp32 master weights; changes "
        "the numbers, so a cell of its own; needs a CPU with avx512_bf16 or AMX, FEDCOND_FORCE_BF16=1 overrides)",
    )
    p.add_argument(
        "--inputs",
        choices=["standardised", "raw"],
        help="what the network sees: standardised pixels (default, per channel) or raw x/255 in [0, 1]",
    )
    p.add_argument(
        "--drop-last",
        action="store_const",
        const=True,
        default=None,
        help="local SGD drops each epoch's partial last batch (PyTorch's drop_last=True; default: kept)",
    )
    p.add_argument(
        "--holdout-clients",
        type=int,
        help="per cluster, clients kept out of training and evaluated as "
        "newcomers with their own statistic (unseen accuracy reported beside the seen one)",
    )


# Help texts generated from the registries, so that a new statistic, family or dataset shows in --help.
def _statistics_help() -> str:
    from .stats import STATISTICS

    return "; ".join(f"{name}: {stat.description}" for name, stat in STATISTICS.items())


def _families_help() -> str:
    from .scenarios import FAMILIES

    return ", ".join(f"{name} ({builder.__name__.replace('_', ' ')})" for name, builder in FAMILIES.items())


def _datasets_help() -> str:
    from .data.registry import DATASETS

    return ", ".join("digits (embedded, default)" if name == "digits" else name for name in DATASETS)


GROUPS_HELP = (
    "E1 / E2a class grouping: semantic (default: classes of one kind together), blocks (consecutive "
    "labels), or explicit groups such as '0,2,3,4,6|1,5,7,8,9'"
)


def _add_scenario_args(p: argparse.ArgumentParser, family_positional: bool) -> None:
    if family_positional:
        p.add_argument(
            "family", help=f"heterogeneity family: {_families_help()}; domain (JDFL) on pacs or office_caltech"
        )
    else:
        p.add_argument(
            "--scenario",
            dest="family",
            default="E1",
            help=f"heterogeneity family (default E1): {_families_help()}; domain (JDFL) on pacs or office_caltech",
        )
    p.add_argument("--dataset", default="digits", help=_datasets_help())
    p.add_argument(
        "--k",
        type=_positive_int,
        help="clusters K (E1, E2a, E3a, E3b), covariate clusters C (E4b) or classes per client "
        "(pathological); default 5 for run, 2 otherwise",
    )
    p.add_argument("--rotations", help="E2b rotation configuration C1..C4 (default C1)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--clients-per-cluster", type=_positive_int, help="clients per cluster (default 5)")
    group.add_argument(
        "--clients", type=_positive_int, help="clients in total (E4a, E4b; the standard partitions: default 100)"
    )
    p.add_argument("--groups", help=GROUPS_HELP)
    _add_partition_args(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the split and of training (default 0)")
    p.add_argument("--data-dir", help="dataset folder (default: $FEDCOND_DATA, else the user cache)")


def _add_partition_args(p: argparse.ArgumentParser) -> None:
    """The standard partitions' parameters (scenarios/standard.py); --k is pathological's classes per client."""
    p.add_argument(
        "--alpha",
        type=_float_in(0, float("inf"), low_open=True),
        help="dirichlet: concentration of each client's class proportions (default 0.3; smaller: more skew)",
    )
    p.add_argument("--shards", type=_positive_int, help="shards: label-sorted shards per client (default 2)")
    p.add_argument(
        "--sigma",
        type=_float_in(0, float("inf")),
        help="quantity skew: sigma of the log-normal client sizes (quantity: default 1; dirichlet, "
        "pathological: default 0, equal sizes)",
    )
    p.add_argument(
        "--samples",
        type=_positive_int,
        help="the standard partitions: training samples per client on average (default: the whole train set)",
    )


def _one_line(message: str) -> str:
    """The message with what a terminal would break or act on (newlines, other controls) escaped:
    errors echo the user's input, and an error is one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump); subcommand parsers inherit the class."""

    def error(self, message: str):
        self.exit(2, f"{_one_line(f'{self.prog}: error: {message}')} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fedcond", description="Client-conditional federated learning and its baselines.")
    _add_version_option(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run_command(sub)
    _add_experiments_command(sub)
    _add_sweep_command(sub)
    _add_report_command(sub)
    _add_study_command(sub)
    _add_encoder_command(sub)
    _add_scenario_command(sub)
    _add_data_command(sub)
    _add_doctor_command(sub)
    _add_config_command(sub)
    _add_results_command(sub)
    from .commands.flower import add_parser as add_flower_parser

    add_flower_parser(sub, _positive_int)
    _validate_options(parser)
    return parser


def _add_version_option(parser: argparse.ArgumentParser) -> None:
    """--version: the package version and the commit, read as results rows read it (version.read_revision)."""
    from .version import read_revision, version_text

    class _Version(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            print(version_text(read_revision()))
            parser.exit()

    parser.add_argument("--version", nargs=0, action=_Version, help="the version and git commit of this fedcond")


def _add_run_command(sub) -> None:
    run = sub.add_parser(
        "run", help="train methods on one scenario and print their accuracy (defaults: E1 on embedded digits)"
    )
    _add_scenario_args(run, family_positional=False)
    run.add_argument(
        "--experiment",
        help="take the scenario from the registry (e.g. E1/mnist/K=2/rich) and record the "
        "rows under that name, so sweeps skip them and reports show them",
    )
    run.add_argument(
        "--methods",
        help="comma list of NAME or NAME(key=value,...), e.g. 'FedAvg,Gossip(independent_init=true)'; "
        "all = the paper's eight; registry = every registered "
        "algorithm; default: the paper's eight and Conditional-FedAvg",
    )
    run.add_argument(
        "--protocol",
        choices=list(PROTOCOLS),
        help="the preset the options below change: paper (default; an experiment's own), jdfl, smoke "
        "(1 epoch on 5%% of the data) or short",
    )
    _add_protocol_args(run)
    run.add_argument("--workers", type=_positive_int, help="processes, one thread each (default: min(2, cores))")
    run.add_argument(
        "--device", default="cpu", help="cpu (default), or e.g. cuda: clients trained as stacked models under vmap"
    )
    run.add_argument("--db", help="results database (default: the user data dir's results.sqlite)")
    run.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    run.add_argument("--json", action="store_true", help="print results as JSON")
    run.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    _add_extension_args(run)
    _add_track_arg(run)


def _add_extension_args(p: argparse.ArgumentParser, model: bool = True) -> None:
    """--plugin (modules that register algorithms, datasets, models, statistics; docs/extending.md)
    and, where something trains, --model."""
    p.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import this module first (repeatable), here and in every worker process: it registers its own "
        "methods, datasets, models or statistics (fedcond.plugins); installed plug-ins load by themselves",
    )
    if model:
        p.add_argument(
            "--model",
            help="the network by name: " + _models_help() + " or a plug-in's (default: chosen by input shape)",
        )


def _models_help() -> str:
    from .models.registry import MODELS

    return ", ".join(MODELS)


def _load_plugin_args(args) -> None:
    """Import the --plugin modules before any name is read (a failure: one line, exit 2); --model
    as registered, so that `mlp` and `MLP` name one sweep cell."""
    if getattr(args, "plugin", None):
        from .plugin_loading import import_plugins

        import_plugins(args.plugin)
    if getattr(args, "model", None) is not None:
        from .models.registry import canonical_model

        args.model = canonical_model(args.model)


CONFIG_HELP = (
    'a TOML file of this command\'s options by long name (e.g. methods = ["FedAvg"], clients_per_cluster = 5), '
    "at the top level or under [run]/[sweep]; options on the command line win"
)


def _add_config_command(sub) -> None:
    cfg = sub.add_parser("config", help="configuration files: print the one that reproduces a recorded row")
    cfg_sub = cfg.add_subparsers(dest="config_command", required=True)
    show = cfg_sub.add_parser("show", help="print a `fedcond run --config` file (TOML) that reproduces row ROW")
    show.add_argument("row", type=_positive_int, help="the row's id (fedcond results list shows them)")
    show.add_argument("--db", help="results database (default: the user data dir's results.sqlite)")


def _add_track_arg(p: argparse.ArgumentParser) -> None:
    from .tracking import TRACK_HELP, parse_track

    def track(text: str):
        try:
            return parse_track(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    p.add_argument("--track", action="append", type=track, metavar="KIND:TARGET", help=TRACK_HELP)


def _add_experiments_command(sub) -> None:
    exps = sub.add_parser("experiments", help="the paper's configurations, by name")
    exps_sub = exps.add_subparsers(dest="experiments_command", required=True)
    ls = exps_sub.add_parser("list", help="list experiments (optionally matching a glob or text)")
    ls.add_argument("pattern", nargs="?", default="*")
    ls.add_argument("--json", action="store_true")


def _add_sweep_command(sub) -> None:
    sw = sub.add_parser("sweep", help="run every (experiment, method, seed) not yet in the results database")
    sw.add_argument("pattern", help="experiment names: a glob such as 'E1/mnist/*', or a comma list, run in its order")
    sw.add_argument(
        "--protocol",
        choices=list(PROTOCOLS),
        help="paper (SPEC A.4), jdfl (JDFL's: lr 0.01, no weight decay; momentum 0.9 and 100 rounds "
        "by probe; evaluated every round), smoke (tiny, for CI) or short (4 epochs: fits a 2-core "
        "session); default: each experiment's own (jdfl for JDFL/*, else paper)",
    )
    sw.add_argument("--seeds", default="0", help="comma list of seeds (default 0)")
    sw.add_argument("--methods", help="comma list or all (default: the experiment's, the paper's eight)")
    sw.add_argument("--db", help="results database (default: the user data dir's results.sqlite)")
    sw.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    sw.add_argument("--data-dir")
    sw.add_argument("--workers", type=_positive_int)
    sw.add_argument("--no-progress", action="store_true")
    sw.add_argument(
        "--ray", metavar="ADDRESS", help="run cells as Ray tasks: local (start one here), auto, or ray://host:port"
    )
    sw.add_argument(
        "--dry-run", action="store_true", help="list the cells and which are already in the database; run nothing"
    )
    sw.add_argument(
        "--checkpoint-every",
        type=_seconds_or_off,
        default=300.0,
        metavar="SECONDS",
        help="save each run's progress this often beside the database (DB.checkpoints/), so a stopped sweep "
        "resumes its cells in flight where they were (default 300; 0: off)",
    )
    _add_protocol_args(sw)
    sw.add_argument("--groups", help=GROUPS_HELP)
    _add_extension_args(sw)


def _add_report_command(sub) -> None:
    rep = sub.add_parser(
        "report", help="Markdown tables and figures from the results database, beside the published numbers"
    )
    rep.add_argument("--db", help="results database (default: the user data dir's results.sqlite)")
    rep.add_argument("--out", default="report", help="output folder (default ./report)")
    rep.add_argument(
        "--explanations",
        help="CSV (experiment, method, explanation) of why cells differ from the "
        "published values by more than 3 pp (default: explanations.csv beside the database, if present)",
    )
    rep.add_argument(
        "--probes",
        help="results database of reading probes, reported beside the default and the published values "
        "(default: probes.sqlite beside the database, if present; only where the database holds `paper` rows, "
        "the default they are compared with)",
    )
    rep.add_argument("--protocol", help="only this protocol's rows (default: all, each in its own tables)")
    rep.add_argument(
        "--readme",
        metavar="PATH",
        help="also refill the reproduction-summary block of this README "
        "(between its '<!-- reproduction summary: begin' and 'end -->' markers) for --protocol",
    )
    _add_extension_args(rep, model=False)


def _add_study_command(sub) -> None:
    st = sub.add_parser("study", help="the earlier study (SPEC Part B): synthetic tasks and EMNIST, printed as tables")
    st_sub = st.add_subparsers(dest="study_command", required=True)
    syn = st_sub.add_parser(
        "synthetic", help="linear/logistic regression, 3 and 8 clusters, six models (~3 min on one core)"
    )
    syn.add_argument("--seed", type=int, default=0)
    em = st_sub.add_parser(
        "emnist", help="EMNIST byclass digits/upper/lower clusters; n_c in 1,2,3,4,8 (a GPU is advised)"
    )
    em.add_argument("--seed", type=int, default=0)
    em.add_argument("--data-dir")
    em.add_argument("--device", default="cpu")


def _add_encoder_command(sub) -> None:
    enc = sub.add_parser("encoder", help="the cross-trained encoder that gives CIFAR clients their statistics")
    enc_sub = enc.add_subparsers(dest="encoder_command", required=True)
    tr = enc_sub.add_parser("train", help="train it on the source dataset and cache it in the data directory")
    tr.add_argument(
        "--source",
        required=True,
        choices=["cifar100", "cifar10", "pacs32"],
        help="cifar100 (the paper's, for CIFAR-10 tasks), cifar10 (for CIFAR-100), pacs32 (stand-in without CIFAR-100)",
    )
    tr.add_argument("--epochs", type=_positive_int, default=50, help="default 50 (the paper's)")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--data-dir", help="where the source data is read and the encoder is written")
    tr.add_argument("--out-dir", help="write the encoder here instead of the data directory")


def _add_scenario_command(sub) -> None:
    scen = sub.add_parser("scenario", help="inspect scenarios")
    scen_sub = scen.add_subparsers(dest="scenario_command", required=True)
    desc = scen_sub.add_parser("describe", help="the clients of one scenario: cluster, sizes, label counts")
    _add_scenario_args(desc, family_positional=True)
    desc.add_argument("--json", action="store_true")
    desc.add_argument(
        "--plot", metavar="FILE.png", help="draw the label distribution per client (stacked bars and a heat map)"
    )
    _add_extension_args(desc, model=False)


def _add_data_command(sub) -> None:
    data = sub.add_parser("data", help="datasets: list, verify, download")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    data_sub.add_parser("list", help="known datasets and whether each is present")
    for name, text in (
        ("verify", "check a dataset's checksums"),
        ("download", "fetch the official files and convert them"),
    ):
        p = data_sub.add_parser(name, help=text)
        p.add_argument("name")
        p.add_argument("--data-dir")
        if name == "download":
            p.add_argument("--force", action="store_true", help="fetch again even if a verified copy is present")


def _add_doctor_command(sub) -> None:
    doc = sub.add_parser(
        "doctor", help="this machine: CPU, vector ISA, torch, threads, and which compiled kernels are on and why"
    )
    doc.add_argument("--json", action="store_true")
    doc.add_argument(
        "--recheck",
        action="store_true",
        help="time the kernels against stock again (e.g. after the first check ran on a busy machine)",
    )


def _add_results_command(sub) -> None:
    from .commands.results import add_parser

    add_parser(sub, _positive_int)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that every `finally` runs: worker pools stop and are
    reaped, databases close; rows already written stay."""


def _raise_terminated(signum, frame):
    raise Terminated()


# each command's handler, imported only when its command runs
COMMANDS = {
    "run": (".commands.run", "run_command"),
    "scenario": (".commands.describe", "describe_command"),
    "data": (".commands.data", "data_command"),
    "encoder": (".commands.encoder", "encoder_command"),
    "experiments": (".commands.experiments", "experiments_command"),
    "sweep": (".commands.sweep", "sweep_command"),
    "study": (".commands.study", "study_command"),
    "doctor": (".commands.doctor", "doctor_command"),
    "flower": (".commands.flower", "flower_command"),
    "config": (".config", "config_command"),
    "results": (".commands.results", "results_command"),
    "report": (".commands.report", "report_command"),
}


def main(argv: list[str] | None = None) -> int:
    import importlib
    import signal
    import threading

    parser = build_parser()
    try:
        from .config import expand

        argv = expand(parser, sys.argv[1:] if argv is None else list(argv))
    except FedcondError as e:
        print(_one_line(f"fedcond: error: {e}"), file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        from .engine import denormals

        denormals.apply()  # checks FEDCOND_DENORMALS before anything runs; sets this thread's mode
        _load_plugin_args(args)
        module, function = COMMANDS[args.command]
        return getattr(importlib.import_module(module, __package__), function)(args)
    except FedcondError as e:
        print(_one_line(f"fedcond: error: {e}"), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:
        print("fedcond: interrupted; finished results are in the database", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    except BrokenPipeError:  # the reader left (`fedcond results | head`): no traceback, as a shell tool would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so exit's flush of stdout cannot fail again
        return 141  # 128 + SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
