"""MkDocs hook: the CLI reference page shows each ``watermark-ops`` command's ``--help``, taken
from the CLI's own parser (:func:`watermark_ops.terminal.cli.build_parser`) at build time, so the page
cannot drift from the flags.

A page holds the marker ``<!-- watermark-ops-cli-help -->``; it is replaced with one section per
command (the help text in a code block, 100 columns wide).
"""

from __future__ import annotations

import argparse
import os

MARKER = "<!-- watermark-ops-cli-help -->"
WIDTH = "100"


def _help(parser: argparse.ArgumentParser) -> str:
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH  # argparse's HelpFormatter reads the width from the terminal size
    try:
        return parser.format_help().rstrip()
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def cli_reference() -> str:
    """The Markdown of every command's help, in the parser's order."""
    from watermark_ops.terminal.cli import build_parser

    parser = build_parser()
    sections = [f"```text\n{_help(parser)}\n```"]
    for action in parser._actions:  # the subcommands' parsers (argparse keeps them on this action)
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                sections.append(f"## `watermark-ops {name}`\n\n```text\n{_help(sub)}\n```")
    return "\n\n".join(sections)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return markdown.replace(MARKER, cli_reference()) if MARKER in markdown else markdown
