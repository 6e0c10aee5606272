"""The text grammar (fedcond.grammar): every name used in the tests, README.md, docs/*.md and
experiments.py reads as it did before the grammar had its own module; bad names are one line."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from fedcond.algorithms import canonical_name, make_algorithm, resolve_methods
from fedcond.errors import FedcondError
from fedcond.experiments import parse_variant
from fedcond.grammar import coerce, key_values

GOLDEN = json.loads((Path(__file__).parent / "grammar_names.json").read_text())


def _default(f: dataclasses.Field):
    """A field's default value, or MISSING where it has none."""
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING


def brief(obj) -> str:
    """An algorithm's repr with only the fields that differ from their defaults (nested algorithms alike),
    so a new field at its default leaves every name's entry as it was; the defaults themselves are
    pinned once per class (GOLDEN["defaults"], test_each_algorithms_defaults_read_as_before)."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return repr(obj)
    shown = []
    for f in dataclasses.fields(obj):
        value, default = getattr(obj, f.name), _default(f)
        if f.repr and (default is dataclasses.MISSING or value != default):
            shown.append(f"{f.name}={brief(value)}")
    return f"{type(obj).__name__}({', '.join(shown)})"


def defaults(cls: type) -> dict[str, str]:
    """Each field of a dataclass with a default: the default's repr."""
    return {f.name: repr(_default(f)) for f in dataclasses.fields(cls) if _default(f) is not dataclasses.MISSING}


def algorithm_classes(obj) -> set[type]:
    """The dataclasses an algorithm is made of: itself and any it holds (a plug-in's base, a loss)."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return set()
    return {type(obj)}.union(*(algorithm_classes(getattr(obj, f.name)) for f in dataclasses.fields(obj)))


def _outcome(f, *args, **kw) -> str:
    try:
        out = f(*args, **kw)
    except FedcondError as e:
        assert "\n" not in str(e), f"a bad name's error spans lines: {e!r}"
        return f"error: {e}"
    return out if isinstance(out, str) else brief(out)


@pytest.mark.parametrize("name", sorted(GOLDEN["names"]))
def test_method_names_read_as_before(name):
    canonical, algorithm = GOLDEN["names"][name]
    assert _outcome(canonical_name, name) == canonical
    assert _outcome(make_algorithm, name, num_clusters=2) == algorithm


def test_each_algorithms_defaults_read_as_before():
    """The defaults of every algorithm class the names above make (brief() leaves them out of each name):
    a changed default changes results, so it must change here too, on purpose."""
    classes = set().union(*(algorithm_classes(make_algorithm(name, num_clusters=2))
                            for name, (_, made) in GOLDEN["names"].items() if not made.startswith("error")))
    assert {c.__name__: defaults(c) for c in classes} == GOLDEN["defaults"]


@pytest.mark.parametrize("name", sorted(GOLDEN["variants"]))
def test_protocol_variants_read_as_before(name):
    assert _outcome(parse_variant, name) == GOLDEN["variants"][name]


@pytest.mark.parametrize("name", ["FedProx(mu=", "FedAvg+jdfl-random(M=abc)", "Gossip(independent_init)", "IFCA(k=true)",
                                  "FedAvg+(M=3)", "nope", "FedAvg+jdfl-random(M=3),Ditto(lam=x)"])
def test_a_bad_method_name_is_one_line(name):
    with pytest.raises(FedcondError) as e:
        resolve_methods(name)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["paper[lr=abc]", "paper[epochs=3.0]", "paper[lr=0.1", "paper[nonsense=1]",
                                  "paper[statistic=None]"])
def test_a_bad_protocol_name_is_one_line(name):
    with pytest.raises(FedcondError) as e:
        parse_variant(name)
    assert "\n" not in str(e.value) and name in str(e.value)


@dataclass(frozen=True)
class _Fields:  # annotations are text here (`from __future__ import annotations`): the grammar resolves them
    n: int = 1
    x: float = 0.5
    maybe: int | None = None
    flag: bool = False
    word: str = "a"
    pair: tuple[int, int] = (1, 2)


@pytest.mark.parametrize("key, text, want", [("n", "3", 3), ("x", "2", 2.0), ("x", "1e-3", 1e-3), ("maybe", "none", None),
                                             ("maybe", "4", 4), ("flag", "TRUE", True), ("word", "3", "3"),
                                             ("pair", "7", 7)])
def test_values_take_the_declared_type(key, text, want):
    got = coerce(_Fields, key, text)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("key, text, message", [("n", "1.5", "n must be a whole number, got '1.5'"),
                                                ("x", "abc", "x must be a number"), ("flag", "1", "flag must be true or false"),
                                                ("n", "none", "n must not be None")])
def test_a_value_of_the_wrong_type_names_the_key(key, text, message):
    with pytest.raises(FedcondError, match=message.replace("(", r"\(")):
        coerce(_Fields, key, text)


def test_key_values_runs_a_listed_key_on_over_commas():
    pairs = key_values("lr=0.02,groups=0,1|2,3,epochs=2", runs_on=("groups",))
    assert [(k, v) for _, k, v in pairs] == [("lr", "0.02"), ("groups", "0,1|2,3"), ("epochs", "2")]
    assert [(k, v) for _, k, v in key_values(" M = 3 ,, e0=1 ,")] == [("M", "3"), ("e0", "1")]
