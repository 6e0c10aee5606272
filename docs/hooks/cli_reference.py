"""mkdocs hook: the CLI reference page is the parser's own help, generated at build time (so it
cannot drift from the code)."""

from __future__ import annotations

import argparse

MARK = "<!-- cli-reference -->"


def _sections(parser: argparse.ArgumentParser, name: str, depth: int = 2) -> list[str]:
    out = [f"{'#' * depth} `{name}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                out += _sections(sub, f"{name} {sub_name}", min(depth + 1, 4))
    return out


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARK not in markdown:
        return markdown
    import os

    os.environ.setdefault("COLUMNS", "100")  # argparse wraps help at the terminal's width
    from fedcond.cli import build_parser

    return markdown.replace(MARK, "\n".join(_sections(build_parser(), "fedcond")))
