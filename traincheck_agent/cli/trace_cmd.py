"""``traincheck trace ...``: commands that read trace files."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from traincheck_agent.cli.errors import fail
from traincheck_agent.trace.reader import TraceFormatError
from traincheck_agent.trace.schema import TRACE_GLOB
from traincheck_agent.trace.summary import format_summary, summarize


def add_parser(commands: Any) -> None:
    """Add ``trace`` and its subcommands to the top-level subparsers."""
    trace = commands.add_parser(
        "trace", help="inspect trace files", description="Inspect trace files."
    )
    trace.set_defaults(help_parser=trace)
    sub = trace.add_subparsers(dest="trace_command", metavar="SUBCOMMAND")
    summary = sub.add_parser(
        "summary",
        help="count records per run and rank",
        description="Count the records in trace files per run id and rank: records by kind, "
        "calls by API, states by variable, steps and phases.",
    )
    summary.add_argument(
        "paths", nargs="+", metavar="PATH", help="trace files or directories (searched recursively)"
    )
    summary.add_argument("--json", action="store_true", help="print the summary as JSON")
    summary.set_defaults(handler=run_summary)


def run_summary(args: argparse.Namespace) -> int:
    """Print the summary of the trace files under ``args.paths``."""
    try:
        result = summarize(args.paths)
    except (FileNotFoundError, TraceFormatError) as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"{exc.filename or ''}: {exc.strerror or exc}")
    if result["files"] == 0:
        return fail(f"no trace files ({TRACE_GLOB}) under {' '.join(args.paths)}")
    if result["files"] == len(result["skipped"]):
        return fail(f"no readable trace files under {' '.join(args.paths)} (every one has no complete line)")
    if args.json:
        options = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE
        sys.stdout.write(orjson.dumps(result, option=options).decode())
    else:
        sys.stdout.write(format_summary(result))
    sys.stdout.flush()
    return 0
