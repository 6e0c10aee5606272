"""Finding and importing plug-ins: modules that register algorithms, datasets, models and
statistics (the registration API is fedcond.plugins; docs/extending.md).

Three sources: the `fedcond.plugins` entry-point group of the installed distributions, loaded once
and lazily, the first time a registry is read by name (so `import fedcond` stays cheap and a
spawned worker loads them by itself); the modules listed in $FEDCOND_PLUGINS, loaded at the same
moment (a process that nobody hands a list to, a Flower SuperNode or Ray actor, takes them from its
own environment: what a party imports is its operator's choice, never a peer's); and the modules
named with `--plugin MODULE`, imported by `import_plugins`, which this process remembers so that it
can hand them to its workers (run.py, engine/pool.py, ray_backend.py), which import them before
they resolve a name.

A foundation module: it imports nothing of fedcond but errors, so every registry may call
`load_entry_points()` without an import circle (the plug-ins themselves import fedcond.plugins).
"""

from __future__ import annotations

import importlib
import os
import sys
from importlib import metadata
from typing import Iterable

from .errors import FedcondError

ENTRY_POINT_GROUP = "fedcond.plugins"
# Set to 1 to ignore installed plug-ins (a clean baseline, or a broken one in the way).
DISABLE_ENV = "FEDCOND_NO_ENTRY_POINTS"
# Comma list of modules every fedcond process here imports when a registry is first read.
PLUGINS_ENV = "FEDCOND_PLUGINS"

_imported: list[str] = []  # --plugin modules imported here, in order
_entry_points: list[str] = []  # entry points loaded here, as `name = value`
_entry_points_state = {"loaded": False}


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _run(target: str) -> None:
    """Import `module` or `module:callable` and call the callable (it registers things)."""
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    if attr:
        obj = module
        for part in attr.split("."):
            obj = getattr(obj, part)
        if not callable(obj):
            raise TypeError(f"{target} is not callable")
        obj()


def import_plugins(modules: Iterable[str], source: str = "--plugin") -> None:
    """Import each `MODULE` (or `MODULE:function`, then called) once; the working directory is
    searched as `python -m` would, so `--plugin my_plugin` finds ./my_plugin.py. Any failure is a
    one-line FedcondError (the CLI's exit 2)."""
    modules = [str(m).strip() for m in modules]
    if not modules:
        return
    cwd = os.getcwd()
    if cwd not in sys.path:  # first, as `python -m` puts it; spawned workers inherit sys.path
        sys.path.insert(0, cwd)
    load_entry_points()  # a --plugin module may build on an installed one
    for target in modules:
        if target in _imported:
            continue
        if not target or target.startswith((".", ":")):
            raise FedcondError(f"{source} '{target}': expected a module name such as my_package.my_plugin")
        try:
            _run(target)
        except FedcondError as e:  # the plug-in's own registration error (a duplicate name, ...)
            raise FedcondError(f"{source} {target}: {e}") from None
        except Exception as e:  # a plug-in is foreign code: whatever it raised, say it in one line
            raise FedcondError(f"{source} {target}: cannot load it: {_first_line(e)}") from None
        _imported.append(target)


def loaded_modules() -> tuple[str, ...]:
    """The --plugin modules imported in this process, in order (what a worker must import too)."""
    return tuple(_imported)


def load_entry_points() -> None:
    """Load every `fedcond.plugins` entry point once (unless $FEDCOND_NO_ENTRY_POINTS is set): a
    module is imported, a callable is called. A failing one is a one-line FedcondError naming it.
    Then the modules of $FEDCOND_PLUGINS (env_plugins), as --plugin would."""
    if _entry_points_state["loaded"]:
        return
    _entry_points_state["loaded"] = True  # first: a plug-in that reads a registry must not load itself again
    if os.environ.get(DISABLE_ENV, "") in ("", "0"):
        _load_installed()
    import_plugins(env_plugins(), source=f"${PLUGINS_ENV}")


def env_plugins() -> list[str]:
    """The modules $FEDCOND_PLUGINS names (comma-separated; blanks ignored)."""
    return [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]


def export_plugins(modules: Iterable[str]) -> None:
    """Hand `modules` to the processes this one starts that are handed no list (a Flower simulation's
    Ray actors): $FEDCOND_PLUGINS gets them, and $PYTHONPATH the working directory, where --plugin
    looks first (a child process may start elsewhere)."""
    modules = [m for m in dict.fromkeys([*env_plugins(), *modules]) if m]
    if not modules:
        return
    os.environ[PLUGINS_ENV] = ",".join(modules)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if os.getcwd() not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([os.getcwd(), *paths])


def _load_installed() -> None:
    """The installed distributions' `fedcond.plugins` entry points, each once."""
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name):
        label = f"{ep.name} = {ep.value}"
        if label in _entry_points:
            continue  # the same distribution seen twice on sys.path
        try:
            obj = ep.load()
            if callable(obj) and not isinstance(obj, type(sys)):
                obj()
        except FedcondError as e:
            raise FedcondError(f"plug-in entry point '{label}': {e} (set {DISABLE_ENV}=1 to skip plug-ins)") from None
        except Exception as e:
            raise FedcondError(
                f"plug-in entry point '{label}' failed to load: {_first_line(e)} (set {DISABLE_ENV}=1 to skip plug-ins)"
            ) from None
        _entry_points.append(label)


def plugins_record() -> list[str]:
    """What a result row records of the plug-ins in this process: each --plugin module, and each
    entry point as `entry point NAME = VALUE`; empty without plug-ins (built-in rows unchanged)."""
    return list(_imported) + [f"entry point {label}" for label in _entry_points]
