"""Configuration files: `fedcond run --config exp.toml`, `fedcond sweep --config sweep.toml`, and
`fedcond config show ROW`, which writes back a file that reproduces a recorded row.

A file holds the command's options by their long names (`clients_per_cluster` or
`clients-per-cluster`), at the top level or under a table named after the command (`[run]`,
`[sweep]`); lists are comma lists (`methods = ["FedAvg", "Conditional"]`), true switches a flag
on. The file's options go before the command line's, so the command line wins (argparse keeps an
option's last value), and every value passes through the same checks as if it had been typed.
TOML: the format of pyproject.toml and of Flower apps (tomllib, in the standard library).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tomllib
from pathlib import Path

from .errors import FedcondError

COMMANDS = ("run", "sweep")


def _split_config(rest: list[str]) -> tuple[str | None, list[str]]:
    """(the --config path, the other tokens)."""
    path, out, i = None, [], 0
    while i < len(rest):
        tok = rest[i]
        if tok == "--config":
            if i + 1 >= len(rest):
                raise FedcondError("--config needs a file")
            path, i = rest[i + 1], i + 2
            continue
        if tok.startswith("--config="):
            path = tok.split("=", 1)[1]
        else:
            out.append(tok)
        i += 1
    return path, out


def _load(path: str, command: str) -> dict:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise FedcondError(f"cannot read the configuration {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise FedcondError(f"{path} is not valid TOML: {e}") from None
    options = {k: v for k, v in data.items() if not isinstance(v, dict)}
    for table, values in ((k, v) for k, v in data.items() if isinstance(v, dict)):
        if table != command:
            raise FedcondError(f"{path}: table [{table}] is not for `fedcond {command}` (use [{command}] or none)")
        options.update(values)
    return options


def _token(path: str, key: str, value) -> str:
    if isinstance(value, list):
        if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
            raise FedcondError(f"{path}: {key} takes a list of plain values")
        return ",".join(str(v) for v in value)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    raise FedcondError(f"{path}: {key} = {value!r} is not a value this option takes")


def _positionals_given(sub: argparse.ArgumentParser, rest: list[str]) -> bool:
    """Whether the command line already holds a positional argument (the sweep's pattern)."""
    takes_value = {
        s for a in sub._actions for s in a.option_strings if a.nargs is None and not isinstance(a, _FLAG_ACTIONS)
    }
    i = 0
    while i < len(rest):
        tok = rest[i]
        if tok == "--":
            return i + 1 < len(rest)
        if tok.startswith("-"):
            i += 2 if tok in takes_value else 1
            continue
        return True
    return False


_FLAG_ACTIONS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._StoreConstAction)


def expand(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """argv with `--config FILE` replaced by the file's options, placed before the command line's."""
    if not argv or argv[0] not in COMMANDS:
        return argv
    command = argv[0]
    path, rest = _split_config(argv[1:])
    if path is None:
        return argv
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    by_name = {s[2:]: a for a in sub._actions for s in a.option_strings if s.startswith("--")}
    positional = {a.dest: a for a in sub._actions if not a.option_strings}
    tokens, front = [], []
    for key, value in _load(path, command).items():
        name = key.replace("_", "-")
        if key in positional:
            if not _positionals_given(sub, rest):  # the command line's pattern replaces the file's
                front.append(_token(path, key, value))
            continue
        action = by_name.get(name)
        if action is None or name in ("config", "help"):
            raise FedcondError(f"{path}: unknown option {key!r} for `fedcond {command}`")
        if isinstance(action, _FLAG_ACTIONS):
            if not isinstance(value, bool):
                raise FedcondError(f"{path}: {key} is a switch: true or false")
            tokens += [f"--{name}"] if value else []
        elif isinstance(action, argparse._AppendAction):  # repeatable (--plugin): one option per item
            for item in value if isinstance(value, list) else [value]:
                tokens += [f"--{name}", _token(path, key, item)]
        else:
            tokens += [f"--{name}", _token(path, key, value)]
    return [command, *front, *tokens, *rest]


# ---- fedcond config show ROW -------------------------------------------------------------------

# the scenario's recorded fields -> `fedcond run` options (the others are implied by these)
_SCENARIO_OPTIONS = {
    "family": "scenario",
    "dataset": "dataset",
    "k": "k",
    "clients_per_cluster": "clients_per_cluster",
    "clients": "clients",
    "rotations": "rotations",
    "groups": "groups",
    "alpha": "alpha",
    "shards": "shards",
    "sigma": "sigma",
    "samples": "samples",
}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a JSON string is a TOML basic string


def _toml_list(values: list) -> str:
    return "[" + ", ".join(_toml_value(v) for v in values) + "]"


def row_config(db: str, row_id: int) -> str:
    """A `fedcond run` configuration (TOML) that reproduces row `row_id` of the results database `db`."""
    if not Path(db).is_file():
        raise FedcondError(f"no results database at {db}")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    try:
        row = con.execute("SELECT * FROM runs WHERE id = ?", (row_id,)).fetchone()
    except sqlite3.DatabaseError as e:
        raise FedcondError(f"{db} is not a fedcond results database ({e})") from None
    finally:
        con.close()
    if row is None:
        raise FedcondError(f"no row {row_id} in {db}")
    from .results import decode_row

    row = decode_row(row)
    scenario, protocol = row["scenario"], row["protocol"]
    lines = [
        f"# fedcond run --config FILE: reproduces row {row_id} of {db}",
        f"# ({row['created_at']}, {row['device']})",
    ]
    # the protocol's fields a command-line option sets (the others are the preset's): what a sweep's cell names
    from .experiments import PROTOCOL_OPTIONS, PROTOCOLS

    options: dict = {"methods": row["method"], "seed": row["seed"]}
    modules = [p for p in (row["extra"] or {}).get("plugins", []) if not p.startswith("entry point ")]
    if modules:  # the --plugin modules it ran with (entry points load by themselves where installed)
        options["plugin"] = modules
    if row["experiment"]:
        from .experiments import parse_variant

        options["experiment"] = row["experiment"]
        preset, changes = parse_variant(row["protocol_name"] or "paper")
        options.update({k: v for k, v in changes.items() if k not in PROTOCOL_OPTIONS})  # e.g. groups
    else:
        preset = next((p for p, (_, f) in PROTOCOLS.items() if f == scenario.get("fraction", 1.0)), "paper")
        options.update({opt: scenario[k] for k, opt in _SCENARIO_OPTIONS.items() if scenario.get(k) is not None})
    options["protocol"] = preset
    base = PROTOCOLS[preset][0]
    for k in PROTOCOL_OPTIONS:
        if protocol.get(k) is not None:
            options[k] = protocol[k]
    unset = {k: v for k, v in protocol.items() if k not in PROTOCOL_OPTIONS and v != getattr(base, k, v)}
    if unset:
        lines.append(f"# not settable from the command line, differs from the {preset} preset: {unset}")
    lines += ["[run]"] + [
        f"{k} = {_toml_list(v) if isinstance(v, list) else _toml_value(v)}" for k, v in options.items()
    ]
    return "\n".join(lines) + "\n"


def config_command(args) -> int:
    """`fedcond config show ROW`: the configuration file that reproduces row ROW of the database."""
    from .results import default_db_path

    print(row_config(args.db or str(default_db_path()), args.row), end="")
    return 0
