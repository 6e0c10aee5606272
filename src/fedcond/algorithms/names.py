"""Methods by name: `NAME`, `NAME(key=value,...)` and `BASE+PLUGIN(key=value,...)`, read with the
grammar's one parser and coercion (fedcond.grammar) against the registry (algorithms.registry)."""

from __future__ import annotations

from ..errors import FedcondError
from ..grammar import CALL, COMPOSITE, coerce, field_types, key_values, split_list
from ..plugin_loading import load_entry_points
from .base import Algorithm
from .registry import ALGORITHMS, DEFAULT_METHODS, JDFL_BASES, PAPER_METHODS, PLUGIN_ARGS, PLUGINS


def _wrapper() -> type:
    """The plug-ins' wrapper. Imported on use: plug-ins build on algorithms, not the reverse."""
    from ..jdfl import JDFL

    return JDFL


def _registered(name: str, choices) -> str | None:
    """`name` as `choices` spell it (any case), or None."""
    load_entry_points()  # installed plug-ins may register algorithms
    return {k.lower(): k for k in choices}.get(name.strip().lower())


def parse_composite(name: str) -> tuple[str, str, dict] | None:
    """`BASE+PLUGIN(args)` -> (canonical base, plugin, wrapper keyword arguments); None for a plain name."""
    m = COMPOSITE.match(name)
    if not m:
        return None
    base, plugin = _registered(m.group(1), JDFL_BASES), m.group(2).lower()
    if base is None:
        raise FedcondError(f"'{name}': a plug-in's base must be one of {', '.join(JDFL_BASES)}")
    if plugin not in PLUGINS:
        raise FedcondError(f"'{name}': unknown plug-in '{plugin}'; choose {', '.join(PLUGINS)}")
    kw = dict(PLUGINS[plugin])
    for item, key, value in key_values(m.group(3)):
        if key.lower() not in PLUGIN_ARGS or not value:
            raise FedcondError(
                f"'{name}': bad plug-in argument '{item}'; use key=value with keys {', '.join(PLUGIN_ARGS)}"
            )
        kw[PLUGIN_ARGS[key.lower()]] = coerce(_wrapper(), PLUGIN_ARGS[key.lower()], value, label=key)
    return base, plugin, kw


def parse_call(name: str) -> tuple[str, dict] | None:
    """`NAME(key=value,...)` -> (registry name, hyper-parameters); None for a name without arguments.
    Keys are the algorithm's fields, e.g. `Gossip(independent_init=true)`, `FedProx(mu=0.1)`."""
    m = CALL.match(name)
    if not m:
        return None
    base = _registered(m.group(1), ALGORITHMS)
    if base is None:
        raise FedcondError(f"unknown method '{m.group(1)}'; choose from {', '.join(ALGORITHMS)}")
    fields = list(field_types(ALGORITHMS[base]))
    kw = {}
    for item, key, value in key_values(m.group(2)):
        if key not in fields or not value:
            raise FedcondError(
                f"'{name}': bad argument '{item}'; use key=value with keys {', '.join(fields) or '(none)'}"
            )
        kw[key] = coerce(ALGORITHMS[base], key, value)
    return base, kw


def canonical_name(name: str) -> str:
    """A method name as the results database stores it (registry casing; plug-in arguments as given)."""
    parts = parse_composite(name)
    if parts is not None:
        base, plugin, _ = parts
        args = [item for item, _, _ in key_values(COMPOSITE.match(name).group(3))]
        return f"{base}+{plugin}" + (f"({','.join(args)})" if args else "")
    call = parse_call(name)
    if call is not None:
        base, kw = call
        return f"{base}({','.join(f'{k}={v}' for k, v in kw.items())})" if kw else base
    base = _registered(name, ALGORITHMS)
    if base is None:
        raise FedcondError(
            f"unknown method '{name}'; choose from {', '.join(ALGORITHMS)} "
            f"or BASE+PLUGIN with plug-ins {', '.join(PLUGINS)}"
        )
    return base


def make_algorithm(name: str, num_clusters: int | None = None, **hyper) -> Algorithm:
    """The algorithm registered as `name` (any case) with `hyper` set, or a plug-in over a base
    (`BASE+PLUGIN(args)`; `hyper` then goes to the base). Algorithms told the true number of
    clusters (IFCA, DAC: ClassVar num_clusters_field) get `num_clusters` unless `hyper` sets it."""
    parts = parse_composite(name)
    if parts is not None:
        base, _, kw = parts
        try:
            return _wrapper()(base=make_algorithm(base, num_clusters, **hyper), **kw)
        except TypeError as e:
            raise FedcondError(f"bad plug-in arguments for {name}: {e}") from None
    call = parse_call(name)
    if call is not None:
        base, kw = call
        return make_algorithm(base, num_clusters, **{**hyper, **kw})
    base = _registered(name, ALGORITHMS)
    if base is None:
        raise FedcondError(f"unknown method '{name}'; choose from {', '.join(ALGORITHMS)}")
    cls = ALGORITHMS[base]
    field = getattr(cls, "num_clusters_field", None)
    if field and num_clusters is not None:
        hyper.setdefault(field, num_clusters)
    try:
        return cls(**hyper)
    except TypeError as e:
        raise FedcondError(f"bad hyper-parameters for {name}: {e}") from None


def resolve_methods(spec: str | None) -> list[str]:
    """None -> DEFAULT_METHODS; 'all' -> the paper's eight; 'registry' -> every registered algorithm;
    else a comma list (commas inside a plug-in's parentheses kept), validated and canonically cased."""
    if spec is None:
        return list(DEFAULT_METHODS)
    load_entry_points()
    if spec.strip().lower() == "registry":
        return list(ALGORITHMS)
    if spec.strip().lower() == "all":
        return [m for m in PAPER_METHODS if m in ALGORITHMS]
    names = split_list(spec)
    if not names:
        raise FedcondError(f"no method given; choose from {', '.join(ALGORITHMS)} or all")
    return [canonical_name(m) for m in names]
