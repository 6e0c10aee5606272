"""Every algorithm, by name. One file per algorithm; this registry is the only lookup."""

from __future__ import annotations

import dataclasses
import re

from ..errors import FedcondError
from .base import Algorithm, Context, State, hyperparameters
from .dac import DAC, DACLoss
from .ditto import Ditto
from .fedavg import ConditionalFedAvg, FedAvg
from .fedavg_ft import FedAvgFT
from .feddc import FedDC
from .feddyn import FedDyn
from .fedproc import FedProc
from .fedprox import FedProx
from .fedrep import FedRep
from .gossip import Gossip
from .ifca import IFCA
from .pefll import PeFLL
from .pfedhn import PFedHN
from .pooled import Conditional, Local, Oracle
from .scaffold import Scaffold

ALGORITHMS: dict[str, type] = {
    # the paper's eight (SPEC A.5)
    "Local": Local,
    "FedAvg": FedAvg,
    "Gossip": Gossip,
    "Ditto": Ditto,
    "IFCA": IFCA,
    "DAC": DAC,
    "Oracle": Oracle,
    "Conditional": Conditional,
    # variants
    "Conditional-FedAvg": ConditionalFedAvg,
    "DAC-loss": DACLoss,
    # federated optimisers (also JDFL's bases)
    "FedProx": FedProx,
    "SCAFFOLD": Scaffold,
    "FedDyn": FedDyn,
    "FedDC": FedDC,
    "FedProc": FedProc,
    # personalisation rivals of Conditional (issue 45)
    "FedAvg-FT": FedAvgFT,
    "FedRep": FedRep,
    "pFedHN": PFedHN,
    "PeFLL": PeFLL,
}

# The eight methods of the paper, in its table order; those not yet implemented are skipped by `all`.
PAPER_METHODS = ("Local", "FedAvg", "Gossip", "Ditto", "IFCA", "DAC", "Oracle", "Conditional")
# What `fedcond run` trains when no method is named: the paper's eight and the deployable Conditional.
DEFAULT_METHODS = PAPER_METHODS + ("Conditional-FedAvg",)


# Plug-ins layered on a base optimiser by name, `BASE+PLUGIN[(key=value,...)]` (SPEC Part C):
# e.g. `SCAFFOLD+jdfl-graded`, `FedAvg+jdfl-random(M=3)`, `FedAvg+expanded-hard`.
PLUGINS: dict[str, dict] = {"jdfl-graded": {"scheme": "graded"}, "jdfl-random": {"scheme": "random"},
                            "expanded-hard": {"scheme": "hard"}}
JDFL_BASES = ("FedAvg", "SCAFFOLD", "FedDyn", "FedDC", "FedProc", "FedProx")
_PLUGIN_ARGS = {"m": "slots", "e0": "e0", "layers": "layers", "batch": "discovery_batch", "alpha": "alpha",
                "tau": "tau", "phi": "phi", "collapse": "collapse", "max_m": "max_slots", "init": "head_init",
                "draw": "draw"}
_COMPOSITE = re.compile(r"^\s*([\w-]+)\s*\+\s*([\w-]+)\s*(?:\((.*)\))?\s*$")
_CALL = re.compile(r"^\s*([\w-]+)\s*\((.*)\)\s*$")  # a registered algorithm with hyper-parameters: NAME(key=value,...)


def _parse_value(text: str):
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.lower() in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _typed(cls: type, key: str, value):
    """`value` checked against the dataclass field's annotation (a string: the modules use
    `from __future__ import annotations`): numbers must be numbers, flags true/false, None only
    where the field allows it. One-line FedcondError otherwise."""
    ann = str(next(f.type for f in dataclasses.fields(cls) if f.name == key)).replace(" ", "")
    kinds = set(ann.replace("Optional[", "").replace("]", "").split("|"))
    if value is None:
        if "None" in kinds or "Optional[" in ann:
            return None
        raise FedcondError(f"{key} must not be None")
    if kinds & {"bool"} and isinstance(value, bool):
        return value
    if kinds & {"int"} and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kinds & {"float"} and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kinds & {"str"} and isinstance(value, str):
        return value
    if not kinds & {"bool", "int", "float", "str"}:  # another type (a tuple, a literal): let the class judge
        return value
    want = ("a whole number" if kinds & {"int"} and not kinds & {"float"} else "a number" if kinds & {"int", "float"}
            else "true or false" if "bool" in kinds else "text")
    raise FedcondError(f"{key} must be {want}, got '{value}'")


def _key_values(args: str | None):
    """(item, key, value) for each `key=value` of a comma list, stripped; empty items skipped."""
    for item in filter(None, (a.strip() for a in (args or "").split(","))):
        key, _, value = (t.strip() for t in item.partition("="))
        yield item, key, value


def parse_composite(name: str) -> tuple[str, str, dict] | None:
    """`BASE+PLUGIN(args)` -> (canonical base, plugin, wrapper keyword arguments); None for a plain name."""
    m = _COMPOSITE.match(name)
    if not m:
        return None
    base, plugin, args = m.group(1), m.group(2).lower(), m.group(3)
    lookup = {k.lower(): k for k in JDFL_BASES}
    if base.lower() not in lookup:
        raise FedcondError(f"'{name}': a plug-in's base must be one of {', '.join(JDFL_BASES)}")
    if plugin not in PLUGINS:
        raise FedcondError(f"'{name}': unknown plug-in '{plugin}'; choose {', '.join(PLUGINS)}")
    kw = dict(PLUGINS[plugin])
    for item, key, value in _key_values(args):
        if key.lower() not in _PLUGIN_ARGS or not value:
            raise FedcondError(f"'{name}': bad plug-in argument '{item}'; use key=value with keys {', '.join(_PLUGIN_ARGS)}")
        kw[_PLUGIN_ARGS[key.lower()]] = _parse_value(value)
    return lookup[base.lower()], plugin, kw


def parse_call(name: str) -> tuple[str, dict] | None:
    """`NAME(key=value,...)` -> (registry name, hyper-parameters); None for a name without arguments.
    Keys are the algorithm's fields, e.g. `Gossip(independent_init=true)`, `FedProx(mu=0.1)`."""
    m = _CALL.match(name)
    if not m:
        return None
    lookup = {k.lower(): k for k in ALGORITHMS}
    base = m.group(1)
    if base.lower() not in lookup:
        raise FedcondError(f"unknown method '{base}'; choose from {', '.join(ALGORITHMS)}")
    base = lookup[base.lower()]
    fields = [f.name for f in dataclasses.fields(ALGORITHMS[base])]
    kw = {}
    for item, key, value in _key_values(m.group(2)):
        if key not in fields or not value:
            raise FedcondError(f"'{name}': bad argument '{item}'; use key=value with keys {', '.join(fields) or '(none)'}")
        kw[key] = _typed(ALGORITHMS[base], key, _parse_value(value))
    return base, kw


def canonical_name(name: str) -> str:
    """A method name as the results database stores it (registry casing; plug-in arguments as given)."""
    parts = parse_composite(name)
    call = parse_call(name) if parts is None else None
    if call is not None:
        base, kw = call
        return f"{base}({','.join(f'{k}={v}' for k, v in kw.items())})" if kw else base
    if parts is None:
        lookup = {k.lower(): k for k in ALGORITHMS}
        if name.strip().lower() not in lookup:
            raise FedcondError(f"unknown method '{name}'; choose from {', '.join(ALGORITHMS)} or BASE+PLUGIN with plug-ins {', '.join(PLUGINS)}")
        return lookup[name.strip().lower()]
    base, plugin, _ = parts
    args = _COMPOSITE.match(name).group(3)
    return f"{base}+{plugin}" + (f"({','.join(a.strip() for a in args.split(',') if a.strip())})" if args and args.strip() else "")


def make_algorithm(name: str, num_clusters: int | None = None, **hyper) -> Algorithm:
    """The algorithm registered as `name` (any case) with `hyper` set, or a plug-in over a base
    (`BASE+PLUGIN(args)`; `hyper` then goes to the base). Algorithms told the true number of
    clusters (IFCA, DAC: ClassVar num_clusters_field) get `num_clusters` unless `hyper` sets it."""
    parts = parse_composite(name)
    if parts is not None:
        from ..jdfl import JDFL

        base, _, kw = parts
        try:
            return JDFL(base=make_algorithm(base, num_clusters, **hyper), **kw)
        except TypeError as e:
            raise FedcondError(f"bad plug-in arguments for {name}: {e}") from None
    call = parse_call(name)
    if call is not None:
        base, kw = call
        return make_algorithm(base, num_clusters, **{**hyper, **kw})
    lookup = {k.lower(): k for k in ALGORITHMS}
    if name.lower() not in lookup:
        raise FedcondError(f"unknown method '{name}'; choose from {', '.join(ALGORITHMS)}")
    cls = ALGORITHMS[lookup[name.lower()]]
    field = getattr(cls, "num_clusters_field", None)
    if field and num_clusters is not None:
        hyper.setdefault(field, num_clusters)
    try:
        return cls(**hyper)
    except TypeError as e:
        raise FedcondError(f"bad hyper-parameters for {name}: {e}") from None


def resolve_methods(spec: str | None) -> list[str]:
    """None -> DEFAULT_METHODS; 'all' -> the paper's eight; 'registry' -> every registered algorithm;
    else a comma list, validated and canonically cased."""
    if spec is None:
        return list(DEFAULT_METHODS)
    if spec.strip().lower() == "registry":
        return list(ALGORITHMS)
    if spec.strip().lower() == "all":
        return [m for m in PAPER_METHODS if m in ALGORITHMS]
    names = _split_methods(spec)
    if not names:
        raise FedcondError(f"no method given; choose from {', '.join(ALGORITHMS)} or all")
    return [canonical_name(m) for m in names]


def _split_methods(spec: str) -> list[str]:
    """Split a comma list, keeping commas inside a plug-in's parentheses."""
    out, depth, cur = [], 0, ""
    for ch in spec:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [m.strip() for m in out if m.strip()]


__all__ = ["ALGORITHMS", "JDFL_BASES", "PLUGINS", "canonical_name", "parse_composite", "DEFAULT_METHODS", "PAPER_METHODS", "Algorithm", "Context", "State", "hyperparameters", "make_algorithm", "resolve_methods"]
