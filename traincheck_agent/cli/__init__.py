"""The ``traincheck`` command line: ``trace summary``, ``infer``, ``invariants show``,
``invariants waive``, ``check``, ``report``, ``demo``.

Each subcommand lives in its own module, which adds its parser and handles its arguments; this
module only wires them together and turns bad input into exit status 2 without a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from traincheck_agent import __version__
from traincheck_agent.cli import check_cmd, demo_cmd, infer_cmd, report_cmd, trace_cmd
from traincheck_agent.cli.errors import EXIT_BAD_INPUT

PROG = "traincheck"
EXIT_OK = 0


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (also used by the docs to list the commands)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Learn training invariants from clean runs and check them online.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    trace_cmd.add_parser(commands)
    infer_cmd.add_parser(commands)
    check_cmd.add_parser(commands)
    report_cmd.add_parser(commands)
    demo_cmd.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 bad input)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors: keep main() returning
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    handler = getattr(args, "handler", None)
    if handler is None:
        (args.help_parser if hasattr(args, "help_parser") else parser).print_help(sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return handler(args)
    except BrokenPipeError:  # output piped into `head`: not an error
        _silence_stdout()
        return EXIT_OK


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


__all__ = ["EXIT_BAD_INPUT", "EXIT_OK", "build_parser", "main"]
