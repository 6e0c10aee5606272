"""The paper's configurations (SPEC A.6), by name, and the protocol presets they run under.

Names read `FAMILY/DATASET/PARAMETER/SPARSITY`, e.g. `E1/mnist/K=2/rich`,
`E2b/fmnist/C3/rich`, `E4a/mnist+fmnist/clients=20`, `E4b/cifar10/C=2/very_sparse`.
A setting that appears in two published tables (e.g. E1 K=2 rich: tables X and XI) is one entry
with both tables listed. Sparsity levels are clients per cluster (groupings.SPARSITY).
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
from dataclasses import dataclass

from . import grammar
from .algorithms import PAPER_METHODS
from .errors import FedcondError
from .protocol import JDFL_PROTOCOL, PAPER, Protocol
from .scenarios import ScenarioSpec
from .scenarios.families import CLUSTERLESS, ON_PARTITION, STANDARD, USER_PARTITIONS
from .scenarios.groupings import E4B_SPARSITY_TOTAL, ROTATIONS, SPARSITY


@dataclass(frozen=True)
class Experiment:
    name: str
    family: str
    dataset: str
    k: int | None = None  # K, or C for E4b
    rotations: str | None = None
    clients_per_cluster: int | None = None
    clients: int | None = None  # in total (E4a, E4b)
    tables: tuple[str, ...] = ()  # the published tables this setting appears in
    paper_setting: dict | None = None  # table -> the `setting` string of paper_results.csv
    methods: tuple[str, ...] = PAPER_METHODS
    preset: str = "paper"  # the protocol preset its cells run under unless a sweep names another
    kind: str = "train"  # train: methods are trained and evaluated | discovery: JDFL's discovery diagnostics
    #   | study: the earlier study's (SPEC Part B, fedcond.study), run by its own code
    alpha: float | None = None  # the standard partitions (scenarios/standard.py): Dirichlet alpha,
    shards: int | None = None  # shards per client,
    sigma: float | None = None  # log-normal quantity skew,
    samples: int | None = None  # training samples per client (None: the whole train set)

    def spec(self, seed: int = 0, data_dir: str | None = None, fraction: float = 1.0, groups: str | None = None):
        return ScenarioSpec(
            family=self.family,
            dataset=self.dataset,
            k=self.k,
            clients_per_cluster=self.clients_per_cluster,
            clients=self.clients,
            rotations=self.rotations,
            seed=seed,
            data_dir=data_dir,
            fraction=fraction,
            groups=groups if self.family in ("E1", "E2a") else None,
            alpha=self.alpha,
            shards=self.shards,
            sigma=self.sigma,
            samples=self.samples,
        )


# Protocol presets: `paper` is SPEC A.4/A.5; `jdfl` is JDFL's (SPEC C.5/C.8: lr 0.01, no weight decay,
# the rest chosen by probes, evaluated every round), which JDFL's experiments run under by default;
# `smoke` is tiny (1 epoch on 5% of the data) for tests and CI; `short` fits a 2-core session
# (4 epochs: JDFL runs 4 rounds of 1 local epoch; the first JDFL tables were measured with it).
PROTOCOLS: dict[str, tuple[Protocol, float]] = {  # name -> (protocol, fraction of each split kept)
    "paper": (PAPER, 1.0),
    "jdfl": (JDFL_PROTOCOL, 1.0),
    "smoke": (PAPER.replace(epochs=1), 0.05),
    "short": (PAPER.replace(epochs=4), 1.0),
}


# Options a sweep may change from its preset. A cell run with changes is named by them,
# `paper[encoder_source=pacs32,groups=blocks]`, so it never takes the place of the preset's cell
# and a report never mixes the two.
PROTOCOL_OPTIONS = (
    "epochs",
    "local_epochs",
    "lr",
    "momentum",
    "conditioning",
    "stats_normalisation",
    "encoder_source",
    "statistic",
    "holdout_clients",
    "eval_every",
    "precision",
    "model",
    "inputs",
    "drop_last",
)
SCENARIO_OPTIONS = ("groups",)


def variant_name(preset: str, changes: dict) -> str:
    """`preset` with the options that differ from it, in a fixed order (the cell's protocol name)."""
    protocol(preset)
    base = dataclasses.asdict(PROTOCOLS[preset][0])
    kept = {k: v for k, v in changes.items() if v is not None and (k in SCENARIO_OPTIONS or base.get(k) != v)}
    unknown = set(kept) - set(PROTOCOL_OPTIONS) - set(SCENARIO_OPTIONS)
    if unknown:
        raise FedcondError(f"not a protocol option: {', '.join(sorted(unknown))}")
    order = PROTOCOL_OPTIONS + SCENARIO_OPTIONS
    return preset + (f"[{','.join(f'{k}={kept[k]}' for k in order if k in kept)}]" if kept else "")


def clients_per_cluster(exp: Experiment) -> int:
    """How many clients each true cluster has (E4a: two datasets; E4b: 2C clusters)."""
    if exp.clients_per_cluster is not None:
        return exp.clients_per_cluster
    if exp.family in STANDARD:  # one bookkeeping group (dirichlet, shards, quantity); pathological's hold_out checks
        return exp.clients or 100
    if exp.clients is not None:
        return exp.clients // (2 if exp.family == "E4a" else 2 * (exp.k or 2))
    return 5


def cell_changes(exp: Experiment, changes: dict) -> dict:
    """The options that apply to `exp`, checked against it and normalised, so that one scenario gets
    one cell name: a grouping only for E1 / E2a (not CIFAR-100's fixed superclasses), dropped where
    it equals the default; a hold-out only where every cluster keeps a training client."""
    from .scenarios import groupings as G

    out = {k: v for k, v in changes.items() if v is not None}
    if "groups" in out:
        groups = str(out["groups"]).strip()
        if exp.family not in ("E1", "E2a") or exp.dataset == "cifar100":
            del out["groups"]
        else:
            resolved = exp.spec(groups=groups).resolved_groups()
            if resolved == exp.spec().resolved_groups():
                del out["groups"]  # the default grouping: the plain cell
            else:
                out["groups"] = groups.lower() if groups.lower() in G.GROUPINGS else resolved
    if out.get("holdout_clients") and exp.kind == "train" and out["holdout_clients"] >= clients_per_cluster(exp):
        raise FedcondError(
            f"--holdout-clients {out['holdout_clients']}: {exp.name} has {clients_per_cluster(exp)} clients "
            "per cluster, and at least one must stay in training"
        )
    return out


def parse_variant(name: str) -> tuple[str, dict]:
    """`paper[lr=0.02,groups=0,1|2,3]` -> ("paper", {"lr": 0.02, "groups": "0,1|2,3"}); values typed as the
    Protocol's."""
    return grammar.parse_variant(name, Protocol, PROTOCOL_OPTIONS, text_options=SCENARIO_OPTIONS)


def protocol(name: str) -> tuple[Protocol, float]:
    """A preset (`paper`, `smoke`, `short`) or a variant of one (`paper[encoder_source=pacs32]`):
    the Protocol and the fraction of each split kept."""
    preset, changes = parse_variant(name)
    if preset not in PROTOCOLS:
        raise FedcondError(f"unknown protocol '{preset}'; choose {', '.join(PROTOCOLS)}")
    proto, fraction = PROTOCOLS[preset]
    return proto.replace(**{k: v for k, v in changes.items() if k in PROTOCOL_OPTIONS}), fraction


def scenario_options(name: str) -> dict:
    """The scenario options (e.g. groups) a protocol name carries."""
    return {k: v for k, v in parse_variant(name)[1].items() if k in SCENARIO_OPTIONS}


def _build() -> dict[str, Experiment]:
    out: dict[str, Experiment] = {}

    def add(exp: Experiment) -> None:
        if exp.name in out:  # a setting in two tables: one entry, both tables
            old = out[exp.name]
            exp = Experiment(
                **{
                    **old.__dict__,
                    "tables": old.tables + exp.tables,
                    "paper_setting": {**(old.paper_setting or {}), **(exp.paper_setting or {})},
                }
            )
        out[exp.name] = exp

    def k_sweep(family: str, dataset: str, ks: tuple[int, ...], table: str) -> None:
        """A family's K sweep at 5 clients per cluster (rich)."""
        for k in ks:
            add(
                Experiment(
                    f"{family}/{dataset}/K={k}/rich",
                    family,
                    dataset,
                    k=k,
                    clients_per_cluster=5,
                    tables=(table,),
                    paper_setting={table: f"K={k}"},
                )
            )

    def sparsity_sweep(family: str, dataset: str, table: str) -> None:
        """A family's K=2 sparsity sweep, rich to super sparse (rich shares its name with the K sweep's)."""
        for s, per_cluster in SPARSITY.items():
            add(
                Experiment(
                    f"{family}/{dataset}/K=2/{s}",
                    family,
                    dataset,
                    k=2,
                    clients_per_cluster=per_cluster,
                    tables=(table,),
                    paper_setting={table: f"K=2,{s}"},
                )
            )

    img = ("mnist", "fmnist", "cifar10")
    for d in img:
        k_sweep("E1", d, (2, 3, 5, 10), "X")
        sparsity_sweep("E1", d, "XI")
    add(
        Experiment(
            "E1/cifar100/K=20/rich",
            "E1",
            "cifar100",
            k=20,
            clients_per_cluster=5,
            tables=("XII",),
            paper_setting={"XII": "K=20"},
        )
    )
    for d in img:
        k_sweep("E2a", d, (2, 3, 4), "XIII")
        sparsity_sweep("E2a", d, "XIV")
    for d in ("mnist", "fmnist"):  # E2b: rotations (Table XV, held back until the reproduction had run untuned)
        for c in ROTATIONS:
            add(
                Experiment(
                    f"E2b/{d}/{c}/rich",
                    "E2b",
                    d,
                    rotations=c,
                    clients_per_cluster=5,
                    tables=("XV",),
                    paper_setting={"XV": c},
                )
            )
    for d in img:
        sparsity_sweep("E3a", d, "XVI")
    for d in img:
        k_sweep("E3b", d, (2, 3, 4, 5), "XVII")
        sparsity_sweep("E3b", d, "XVIII")
    for n in (10, 20, 50, 100):  # E4a (its table is not given here)
        add(Experiment(f"E4a/mnist+fmnist/clients={n}", "E4a", "mnist", clients=n))
    for c in (2, 3, 4):  # E4b
        add(
            Experiment(
                f"E4b/cifar10/C={c}/rich",
                "E4b",
                "cifar10",
                k=c,
                clients=2 * c * 5,
                tables=("XX",),
                paper_setting={"XX": f"C={c}"},
            )
        )
    for s, total in E4B_SPARSITY_TOTAL.items():
        add(
            Experiment(
                f"E4b/cifar10/C=2/{s}",
                "E4b",
                "cifar10",
                k=2,
                clients=total,
                tables=("XXI",),
                paper_setting={"XXI": f"C=2,{s}"},
            )
        )
    for exp in standard_experiments():
        add(exp)
    for exp in jdfl_experiments():
        add(exp)
    for exp in study_experiments():
        add(exp)
    return out


# ---- The standard partitions of personalised-FL papers (scenarios/standard.py) -------------------
# No Oracle where the partition has no true clusters (dirichlet, shards); IFCA is left to be named
# (its K is a choice there, not the truth).
STANDARD_METHODS = ("Local", "FedAvg", "Ditto", "Conditional", "Conditional-FedAvg")


def standard_experiments() -> list[Experiment]:
    """`dirichlet/DATASET/alpha=A/clients=N`, `pathological/DATASET/k=K/clients=N`,
    `shards/DATASET/shards=S/clients=N`, `quantity/DATASET/sigma=S/clients=N`, and Dirichlet with
    quantity skew `dirichlet/DATASET/alpha=A/sigma=S/clients=N`; the whole train set, 100 clients."""
    out = []
    for d in ("mnist", "fmnist", "cifar10"):
        for alpha in (0.1, 0.3, 1.0):
            out.append(
                Experiment(f"dirichlet/{d}/alpha={alpha:g}/clients=100", "dirichlet", d, alpha=alpha, clients=100)
            )
        out.append(
            Experiment(
                f"dirichlet/{d}/alpha=0.3/sigma=1/clients=100", "dirichlet", d, alpha=0.3, sigma=1.0, clients=100
            )
        )
        for k in (2, 5):
            out.append(
                Experiment(
                    f"pathological/{d}/k={k}/clients=100",
                    "pathological",
                    d,
                    k=k,
                    clients=100,
                    methods=STANDARD_METHODS + ("Oracle",),
                )
            )
        out.append(Experiment(f"shards/{d}/shards=2/clients=100", "shards", d, shards=2, clients=100))
        out.append(Experiment(f"quantity/{d}/sigma=1/clients=100", "quantity", d, sigma=1.0, clients=100))
    return [dataclasses.replace(e, methods=STANDARD_METHODS) if e.methods == PAPER_METHODS else e for e in out]


def study_experiments() -> list[Experiment]:
    """The earlier study's settings (SPEC Part B: MCDC/*), in the same registry as the paper's."""
    from .study import EXPERIMENTS as STUDY

    return [
        Experiment(name, family="MCDC", dataset=e.dataset, k=e.clusters, methods=tuple(e.methods), kind="study")
        for name, e in STUDY.items()
    ]


# ---- JDFL (SPEC Part C) --------------------------------------------------------------------------
JDFL_DATASETS = {"pacs": "pacs", "office": "office_caltech"}  # experiment name part -> dataset
JDFL_SCHEMES = ("jdfl-graded", "jdfl-random")
JDFL_SLOT_SWEEP = tuple(range(2, 8))  # M = 2..7 (PACS has 4 domains)
DISCOVERY_GRID = {"e0": (1, 2, 3, 4, 5), "batch": (16, 32, 64), "layers": ("A", "B", "C")}


def jdfl_experiments() -> list[Experiment]:
    """Per dataset: `main` (five bases x {standalone, graded, random}), `ablation` (FedAvg with the
    hard client-fixed joint labels; its FedAvg, graded and random cells are main's), `m_sweep`
    (FedAvg with M fixed to 2..7; M = 1 is FedAvg itself), `replicate` (main's JDFL cells with the
    head initialised as M copies of the base's C-way head instead of drawn anew), `random_per_sample` (the
    random scheme with each sample's slot fixed for the run instead of drawn at every step) and, on PACS,
    `discovery` (the ARI of the
    pseudo-domains with M = 4 over E0 x batch x layer subset, and what the elbow picks)."""
    from .algorithms import JDFL_BASES

    bases = tuple(b for b in JDFL_BASES if b != "FedProx")  # SPEC C.5's five
    out = []
    for short, dataset in JDFL_DATASETS.items():
        common = dict(family="domain", dataset=dataset, clients_per_cluster=5, preset="jdfl")
        out.append(
            Experiment(
                f"JDFL/{short}/main",
                methods=tuple(m for b in bases for m in (b, *(f"{b}+{s}" for s in JDFL_SCHEMES))),
                **common,
            )
        )
        out.append(Experiment(f"JDFL/{short}/ablation", methods=("FedAvg+expanded-hard",), **common))
        out.append(
            Experiment(
                f"JDFL/{short}/replicate",
                methods=tuple(f"{b}+{s}(init=replicate)" for b in bases for s in JDFL_SCHEMES),
                **common,
            )
        )
        out.append(
            Experiment(
                f"JDFL/{short}/random_per_sample",
                methods=tuple(f"{b}+jdfl-random(draw=sample)" for b in bases),
                **common,
            )
        )
        out.append(
            Experiment(
                f"JDFL/{short}/m_sweep",
                methods=tuple(f"FedAvg+{s}(M={m})" for m in JDFL_SLOT_SWEEP for s in JDFL_SCHEMES),
                **common,
            )
        )
    out.append(
        Experiment(
            "JDFL/pacs/discovery",
            family="domain",
            dataset="pacs",
            clients_per_cluster=5,
            kind="discovery",
            preset="jdfl",
            methods=tuple(
                f"discovery(e0={e},batch={b},layers={lay})"
                for b in DISCOVERY_GRID["batch"]
                for e in DISCOVERY_GRID["e0"]
                for lay in DISCOVERY_GRID["layers"]
            ),
        )
    )
    return out


EXPERIMENTS: dict[str, Experiment] = _build()

USER_PARTITION_DATASETS = ("mnist", "fmnist", "cifar10")  # the registry names a plug-in's partition gets
USER_PARTITION_CLIENTS = (20, 100)


def add_partition_experiments(family: str, clustered: bool) -> None:
    """`FAMILY/DATASET/clients=N` for a plug-in's partition (plugins.register_partition), so sweeps,
    the report and config files name its cells as they name the standard partitions'."""
    for d in USER_PARTITION_DATASETS:
        for n in USER_PARTITION_CLIENTS:
            name = f"{family}/{d}/clients={n}"
            methods = STANDARD_METHODS + (("Oracle",) if clustered else ())
            EXPERIMENTS.setdefault(name, Experiment(name, family, d, clients=n, methods=methods))


for _name in USER_PARTITIONS:  # registered before this module was imported
    add_partition_experiments(_name, _name not in CLUSTERLESS)
ON_PARTITION.append(add_partition_experiments)


def select(pattern: str) -> list[Experiment]:
    """Experiments named by a comma list of globs (`E1/mnist/*`), exact names or texts a name
    contains, in the list's order (a glob's matches in the registry's), each once. Every item must
    match: one that matches nothing is a clear error naming the closest names, not silently dropped."""
    hits: dict[str, Experiment] = {}
    for p in (p.strip() for p in pattern.split(",")):
        if not p:
            continue
        found = [e for e in EXPERIMENTS.values() if _matches(e.name, p)]
        if not found:
            close = difflib.get_close_matches(p, list(EXPERIMENTS), n=5, cutoff=0.3)
            raise FedcondError(f"no experiment matches '{p}'" + (f"; closest: {', '.join(close)}" if close else ""))
        hits.update((e.name, e) for e in found if e.name not in hits)
    if not hits:
        raise FedcondError("no experiment named: give a name, a glob such as 'E1/mnist/*', or a comma list")
    return list(hits.values())


def _matches(name: str, p: str) -> bool:
    if any(c in p for c in "*?["):
        return fnmatch.fnmatch(name, p)
    return name == p if p in EXPERIMENTS else p in name  # an exact name means that one only
