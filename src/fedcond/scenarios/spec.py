"""A scenario by its arguments: `make_scenario` builds any family from uniform arguments, and
`ScenarioSpec` holds those arguments (cheap to pickle, rebuilt identically anywhere: worker
processes, Ray tasks and Flower nodes each rebuild the scenario from it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial

from .. import data
from ..errors import FedcondError
from ..plugin_loading import load_entry_points
from . import groupings as G
from .families import FAMILIES, STANDARD, USER_PARTITIONS
from .federation import Scenario
from .partition import subsample


def make_scenario(
    family: str,
    dataset: str,
    load,
    *,
    k: int | None = None,
    clients_per_cluster: int | None = None,
    clients: int | None = None,
    rotations: str | None = None,
    seed: int = 0,
    groups: str | None = None,
    alpha: float | None = None,
    shards: int | None = None,
    sigma: float | None = None,
    samples: int | None = None,
) -> Scenario:
    """Build any family from uniform arguments (what the command line and experiments pass).

    `k` is K for E1/E2a/E3a/E3b and C for E4b; `rotations` is C1..C4 for E2b; E4a and E4b count
    clients in total (`clients`), the others per cluster (`clients_per_cluster`, default 5). `groups` names
    the class grouping of E1 and E2a (groupings.GROUPINGS, or explicit '0,1|2,3'). Family names
    are accepted in any case. The standard partitions (dirichlet, pathological, shards, quantity)
    count clients in total (default 100) and take `alpha` (dirichlet), `k` (pathological: classes
    per client), `shards` (shards per client), `sigma` (log-normal quantity skew: quantity, and
    dirichlet / pathological combined with it) and `samples` (per client; None: the whole train set).
    """
    family = canonical_family(family)
    _check_standard_options(family, k, rotations, clients_per_cluster, alpha, shards, sigma, samples)
    if family in STANDARD:
        return _make_standard(family, dataset, load, k, clients, seed, alpha, shards, sigma, samples)
    if groups is not None and family not in ("E1", "E2a"):
        raise FedcondError(f"--groups applies to E1 and E2a only, not to {family}")
    builder = FAMILIES[family]
    if family in ("E4a", "E4b"):
        if clients_per_cluster is not None:
            raise FedcondError(f"{family} counts clients in total: use --clients, not --clients-per-cluster")
        total = clients if clients is not None else (10 if family == "E4a" else 20)
        if family == "E4a":
            return builder(dataset, load, clients=total, seed=seed)
        return builder(dataset, load, c=k or 2, clients=total, seed=seed)
    if family == "domain":
        if clients is not None or k is not None:
            raise FedcondError("the domain family takes --clients-per-cluster (clients per domain) only")
        return builder(dataset, load, clients_per_domain=clients_per_cluster or 5, seed=seed)
    if clients is not None:
        raise FedcondError(f"{family} counts clients per cluster: use --clients-per-cluster, not --clients")
    per = clients_per_cluster if clients_per_cluster is not None else 5
    if family == "E2b":
        return builder(dataset, load, rotations=rotations or "C1", clients_per_cluster=per, seed=seed)
    if family in ("E1", "E2a"):
        return builder(dataset, load, k=k or 2, clients_per_cluster=per, seed=seed, groups=groups)
    return builder(dataset, load, k=k or 2, clients_per_cluster=per, seed=seed)


def _check_standard_options(family, k, rotations, clients_per_cluster, alpha, shards, sigma, samples) -> None:
    """Every option the family does not take is a clear error, not silently ignored."""
    takes = {
        "dirichlet": ("alpha", "sigma", "samples"),
        "pathological": ("k", "sigma", "samples"),
        "shards": ("shards", "samples"),
        "quantity": ("sigma", "samples"),
        **{name: ("samples",) for name in USER_PARTITIONS},  # a plug-in's: clients, seed and samples only
    }.get(family, ())
    given = {"alpha": alpha, "shards": shards, "sigma": sigma, "samples": samples}
    if family in STANDARD:
        given.update({"k": k, "rotations": rotations, "clients_per_cluster": clients_per_cluster})
    wrong = [name for name, value in given.items() if value is not None and name not in takes]
    if wrong:
        options = ", ".join("--" + name.replace("_", "-") for name in wrong)
        allowed = ", ".join("--" + t for t in ("clients", "seed", *takes))
        raise FedcondError(f"{options} does not apply to {family} (it takes {allowed})")


def _make_standard(family, dataset, load, k, clients, seed, alpha, shards, sigma, samples) -> Scenario:
    builder = FAMILIES[family]
    common = dict(clients=clients if clients is not None else 100, samples=samples, seed=seed)
    if family in USER_PARTITIONS:
        return builder(dataset, load, **common)
    if family == "dirichlet":
        return builder(dataset, load, alpha=alpha if alpha is not None else 0.3, sigma=sigma or 0.0, **common)
    if family == "pathological":
        return builder(dataset, load, k=k if k is not None else 2, sigma=sigma or 0.0, **common)
    if family == "shards":
        return builder(dataset, load, shards=shards if shards is not None else 2, **common)
    return builder(dataset, load, sigma=sigma if sigma is not None else 1.0, **common)


def canonical_family(family: str) -> str:
    """A family name as registered (E1, E2a, ..., domain), from any case; a clear error otherwise."""
    load_entry_points()  # a plug-in's partition is a family (a worker may read one first)
    lookup = {name.lower(): name for name in FAMILIES}
    if str(family).strip().lower() not in lookup:
        raise FedcondError(f"unknown scenario family '{family}'; choose one of {', '.join(FAMILIES)}")
    return lookup[str(family).strip().lower()]


_DEFAULT_K = 5


@dataclass(frozen=True)
class ScenarioSpec:
    """A scenario by its arguments: cheap to pickle, rebuilt identically anywhere."""

    family: str = "E1"
    dataset: str = "digits"
    k: int | None = _DEFAULT_K
    clients_per_cluster: int | None = None
    clients: int | None = None
    rotations: str | None = None
    seed: int = 0
    data_dir: str | None = None
    fraction: float = 1.0  # keep this share of every split (stratified, seeded): the smoke protocol's speed
    groups: str | None = (
        None  # E1 / E2a class grouping: a name (scenarios.groupings.GROUPINGS) or '0,1|2,3'; None: default
    )
    alpha: float | None = None  # the standard partitions (standard.py): Dirichlet concentration,
    shards: int | None = None  # shards per client,
    sigma: float | None = None  # log-normal quantity skew,
    samples: int | None = None  # training samples per client (None: the whole train set)

    def __post_init__(self):
        object.__setattr__(self, "family", canonical_family(self.family))
        if self.family in STANDARD and self.family != "pathological" and self.k == _DEFAULT_K:
            object.__setattr__(self, "k", None)  # the E-families' default K is no option of these

    def build(self) -> Scenario:
        load = partial(data.load, data_dir=self.data_dir)
        if self.fraction < 1.0:
            base = load
            load = lambda name: subsample(base(name), self.fraction, self.seed)  # noqa: E731
        return make_scenario(
            self.family,
            self.dataset,
            load,
            k=self.k,
            clients_per_cluster=self.clients_per_cluster,
            clients=self.clients,
            rotations=self.rotations,
            seed=self.seed,
            groups=self.groups,
            alpha=self.alpha,
            shards=self.shards,
            sigma=self.sigma,
            samples=self.samples,
        )

    def describe(self) -> dict:
        """The arguments as a results row records them; E1/E2a with the class groups resolved, so a
        row says which grouping made it even after the default changes."""
        d = dataclasses.asdict(self)
        d.pop("data_dir")
        if d["fraction"] == 1.0:
            d.pop("fraction")
        resolved = self.resolved_groups()
        if resolved is not None:
            d["groups"] = resolved
        return {k: v for k, v in d.items() if v is not None}

    def resolved_groups(self) -> str | None:
        """E1 / E2a: the class groups as '0,1,2|3,4' (no data read); None for other families, and
        for a plug-in's dataset (its class count is not known without reading it)."""
        if not data.registry.is_builtin(self.dataset):
            return None
        if self.family == "E1" and self.dataset != "cifar100":
            return G.format_groups(G.e1_groups(self.dataset, self.k or 2, self.groups))
        if self.family == "E2a":
            return G.format_groups(m for _, m in G.e2a_superclasses(self.dataset, self.groups))
        return None
