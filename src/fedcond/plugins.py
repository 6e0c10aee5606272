"""The extension API: bring an algorithm, a dataset, a partition, a model or a client statistic of
one's own (docs/extending.md). Each `register_*` writes into the registry the built-ins live in
(algorithms.registry.ALGORITHMS, data.registry.DATASETS, scenarios.FAMILIES, models.registry.MODELS,
stats.STATISTICS), so a registered name works wherever a built-in one does: `--methods`,
`--dataset`, `--scenario`, `--model`, `--statistic`, sweeps, reports. Each is also a decorator:

    @register_algorithm("FedAvgM")
    @dataclass(frozen=True)
    class FedAvgM(Algorithm): ...

Registration happens at import: in a module named with `--plugin MODULE` (imported in every
worker process too), or in one an installed distribution declares in the `fedcond.plugins`
entry-point group (plugin_loading). A bad name or object is a one-line FedcondError.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, TypeVar

import torch.nn as nn

from .algorithms.base import Algorithm
from .algorithms.registry import ALGORITHMS
from .data.registry import _ALIASES, DATASETS, OPTIONS
from .data.types import DomainData, ImageData
from .errors import FedcondError
from .models.custom import plugin_builder
from .models.registry import MODELS
from .plugin_loading import import_plugins, load_entry_points, loaded_modules
from .stats import STATISTICS, Statistic

__all__ = [
    "Algorithm",
    "DomainData",
    "ImageData",
    "Statistic",
    "load_plugins",
    "loaded_modules",
    "register_algorithm",
    "register_dataset",
    "register_model",
    "register_partition",
    "register_statistic",
]

T = TypeVar("T")
# What the method grammar reads as one name (grammar.CALL, COMPOSITE): letters, digits, _ and -.
_NAME = re.compile(r"^[A-Za-z_][\w-]*$")
_RESERVED_METHODS = ("all", "registry")  # resolve_methods' keywords


def load_plugins(*modules: str) -> None:
    """Import plug-in modules (`package.module` or `package.module:function`, then called), as
    `--plugin` does; run_methods passes them on to its worker processes."""
    import_plugins(modules)


def _check_name(kind: str, name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise FedcondError(f"{kind} name {name!r}: use letters, digits, '_' and '-', starting with a letter")
    return name


def _claim(
    kind: str, registry: dict, name: str, obj: object, taken: dict[str, str], given: str = "", same=None
) -> None:
    """Put `obj` under `name` unless the name (any case) is taken by something else; the same object
    again is no change (a module imported twice, or registered by its entry point and by hand).
    `given`: the name as the caller spelt it; `same(old, new)`: what counts as the same object."""
    other = taken.get(name.lower())
    if other is None:
        registry[name] = obj
    elif not (same or (lambda a, b: a is b))(registry[other], obj):
        raise FedcondError(f"{kind} '{given or name}' is already registered (as '{other}'); choose another name")


def _decorator_or_call(register: Callable[[T], None], obj: T | None):
    if obj is not None:
        register(obj)
        return obj

    def decorate(o: T) -> T:
        register(o)
        return o

    return decorate


def register_algorithm(name: str, cls: type | None = None):
    """Register an algorithm class under `name` (`--methods NAME`, `NAME(field=value)`).

    `cls`: a frozen dataclass of its hyper-parameters that subclasses fedcond.algorithms.Algorithm,
    with the class variables `conditioned`, `needs_truth` and `federated` (algorithms/base.py).
    Without `cls`, a class decorator."""
    _check_name("algorithm", name)
    if name.lower() in _RESERVED_METHODS:
        raise FedcondError(f"algorithm name '{name}' is a --methods keyword; choose another")

    def register(c: type) -> None:
        if not isinstance(c, type) or Algorithm not in c.__mro__:  # a typing.Protocol: no issubclass
            raise FedcondError(f"algorithm '{name}': expected a subclass of fedcond.algorithms.Algorithm, got {c!r}")
        if not dataclasses.is_dataclass(c):
            raise FedcondError(f"algorithm '{name}': {c.__name__} must be a dataclass (its fields: hyper-parameters)")
        missing = [v for v in ("conditioned", "needs_truth", "federated") if not isinstance(getattr(c, v, None), bool)]
        if missing:
            raise FedcondError(f"algorithm '{name}': {c.__name__} must set the class variables {', '.join(missing)}")
        load_entry_points()  # a name an installed plug-in takes is taken
        _claim("algorithm", ALGORITHMS, name, c, {k.lower(): k for k in ALGORITHMS})

    return _decorator_or_call(register, cls)


def register_dataset(name: str, loader: Callable | None = None, options: tuple[str, ...] = ()):
    """Register a dataset loader under `name` (`--dataset NAME`, `ScenarioSpec(dataset=NAME)`).

    `loader(data_dir, **options)` returns a fedcond.data.ImageData (train/test split) or DomainData
    (domains, no split); `data_dir` is the --data-dir given (None: $FEDCOND_DATA or the user
    cache; fedcond.data.resolve_data_dir resolves it). `options`: the keyword options it accepts.
    Without `loader`, a function decorator."""
    _check_name("dataset", name)
    key = name.lower().replace("-", "_")

    def register(f: Callable) -> None:
        if not callable(f):
            raise FedcondError(f"dataset '{name}': the loader must be callable, got {type(f).__name__}")
        load_entry_points()
        if key in _ALIASES:
            raise FedcondError(f"dataset '{name}' is already registered (as '{_ALIASES[key]}'); choose another name")
        _claim("dataset", DATASETS, key, f, {k: k for k in DATASETS}, given=name)
        if options:
            OPTIONS[key] = tuple(options)

    return _decorator_or_call(register, loader)


def register_model(name: str, factory: Callable[..., nn.Module] | None = None, *, conditions_itself: bool = False):
    """Register a network factory under `name` (`--model NAME`, Protocol(model=NAME)).

    Default: `factory(input_shape, num_classes) -> nn.Module` with `forward(x)` on normalised float
    images [B, C, H, W]; for conditioned methods it needs `features(x) -> [B, D]` and a `head`
    nn.Linear(D, K), and fedcond conditions it (concat or film, models/custom.py).
    conditions_itself=True: `factory(input_shape, num_classes, stat_dim, conditioning)` and
    `forward(x, s=None)`. Without `factory`, a function decorator."""
    _check_name("model", name)

    def register(f: Callable[..., nn.Module]) -> None:
        if not callable(f):
            raise FedcondError(f"model '{name}': the factory must be callable, got {type(f).__name__}")
        load_entry_points()
        taken = {k.lower(): k for k in MODELS}
        if name.lower() in taken:  # a builder wraps each factory anew: compare the factories
            if getattr(MODELS[taken[name.lower()]], "factory", None) is f:
                return
            other = taken[name.lower()]
            raise FedcondError(f"model '{name}' is already registered (as '{other}'); choose another name")
        builder = plugin_builder(name, f, conditions_itself)
        builder.factory = f  # type: ignore[attr-defined]
        MODELS[name] = builder

    return _decorator_or_call(register, factory)


def register_statistic(
    name: str,
    statistic: Statistic | None = None,
    *,
    description: str | None = None,
    dim: Callable[[int, int], int] | None = None,
    uses_data: bool = True,
):
    """Register a client statistic under `name` (`--statistic NAME`): a fedcond.stats.Statistic
    (description, dim(l, C) -> its width, compute(xs, ys, ids, num_classes, l, phi, method, seed) ->
    [N, width] array over the N clients, uses_data). Without `statistic`, a decorator of the compute
    function, with `description` and `dim` given here."""
    _check_name("statistic", name)

    def register(s: Statistic) -> None:
        if not isinstance(s, Statistic):
            raise FedcondError(f"statistic '{name}': expected a fedcond.stats.Statistic, got {type(s).__name__}")
        if not callable(s.dim) or not callable(s.compute):
            raise FedcondError(f"statistic '{name}': dim and compute must be callables")
        load_entry_points()
        taken = {k.lower(): k for k in STATISTICS}
        _claim("statistic", STATISTICS, name, s, taken, same=lambda a, b: a is b or a.compute is b.compute)

    if statistic is not None:
        register(statistic)
        return statistic
    if description is None or dim is None:
        raise FedcondError(f"statistic '{name}': as a decorator, give description= and dim=")

    def decorate(compute: Callable):
        register(Statistic(description, dim, compute, uses_data))
        return compute

    return decorate


def register_partition(name: str, partition: Callable | None = None, *, clusters: bool = False):
    """Register a way of dealing training samples to clients as a scenario family under `name`
    (`--scenario NAME --clients N --dataset D`, and the sweep names `NAME/{mnist,fmnist,cifar10}/clients={20,100}`).

    `partition(labels, num_classes, clients, rng) -> parts`: `labels` the training labels [n]
    (int64 numpy), `rng` a numpy Generator seeded from the scenario's seed (use it for every draw:
    the same seed gives the same split), `parts` one array of sample indices per client, no sample
    twice. With `clusters=True` it returns `(parts, cluster id of each client)`: the true clusters,
    so Oracle, IFCA's ARI and `--holdout-clients` apply; without, the federation has none. fedcond
    gives each client test samples in its own label mix and builds the federation
    (scenarios/user_partition.py). Without `partition`, a function decorator."""
    from .scenarios.families import CLUSTERLESS, FAMILIES, ON_PARTITION, STANDARD, USER_PARTITIONS
    from .scenarios.user_partition import partition_builder

    _check_name("partition", name)

    def register(fn: Callable) -> None:
        if not callable(fn):
            raise FedcondError(f"partition '{name}': expected a function, got {type(fn).__name__}")
        load_entry_points()
        taken = {k.lower(): k for k in FAMILIES}
        if name.lower() in taken:
            if USER_PARTITIONS.get(taken[name.lower()]) is fn:
                return  # the same function again: a module imported twice
            raise FedcondError(
                f"scenario family '{name}' is already registered (as '{taken[name.lower()]}'); choose another name"
            )
        USER_PARTITIONS[name] = fn
        FAMILIES[name] = partition_builder(name, fn, clusters)
        STANDARD.append(name)
        if not clusters:
            CLUSTERLESS.append(name)
        for hook in ON_PARTITION:
            hook(name, clusters)

    return _decorator_or_call(register, partition)
