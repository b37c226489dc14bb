"""``traincheck report``: an HTML report of the violations of a run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from traincheck_agent.cli.errors import fail
from traincheck_agent.terminal_text import write_line

DEFAULT_NAME = "report.html"


def add_parser(commands: Any) -> None:
    report = commands.add_parser(
        "report",
        help="write an HTML report of violations",
        description="Read every violations-*.jsonl under DIR (written by check mode or "
        "`traincheck check`), group and rank the violations, likely root cause first, and write "
        "one self-contained HTML file: the groups with their evidence and timelines of the "
        "violations per step and per rank.",
    )
    report.add_argument("dir", type=Path, metavar="DIR",
                        help="directory searched recursively for violations-*.jsonl (or one file)")
    report.add_argument("-o", "--output", type=Path, default=None,
                        help=f"HTML file to write (default DIR/{DEFAULT_NAME})")
    report.add_argument("--waive", type=Path, default=None, metavar="WAIVERS",
                        help="waivers file (docs/waivers.md): judge every violation against it instead of "
                        "the marks the check left; what it covers is listed under Waived")
    report.set_defaults(handler=run_report)


def run_report(args: argparse.Namespace) -> int:
    from traincheck_agent.check.waivers import WaiverFileError, read_waivers
    from traincheck_agent.report.html import SkippedRecords, ViolationFileError, write_report
    from traincheck_agent.report.sentences import plural

    try:
        waivers = read_waivers(args.waive) if args.waive is not None else None
    except WaiverFileError as exc:
        return fail(str(exc))
    output = args.output
    if output is None:
        output = (args.dir.parent if args.dir.is_file() else args.dir) / DEFAULT_NAME
    skipped = SkippedRecords()
    notes: list[str] = []
    try:
        records, distinct, groups, files = write_report(args.dir, output, skipped, waivers, notes)
    except ViolationFileError as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"{exc.filename or output}: cannot write the report: {exc.strerror or exc}")
    if not files:
        write_line(sys.stdout, f"no violations files under {args.dir}: the report says so -> {output}")
    else:
        repeated = f" ({plural(records, 'record')})" if records != distinct else ""
        write_line(sys.stdout, f"{plural(distinct, 'violation')}{repeated} in {plural(groups, 'group')} "
                   f"from {plural(files, 'file')} -> {output}")
    for note in notes:
        write_line(sys.stdout, note)
    if skipped.count:
        # The report shows the readable records; the status still says the input was bad.
        return fail(f"{skipped.first} ({skipped.count} bad record(s) skipped, the first shown)")
    return 0
