"""``traincheck check``: check collected traces against invariants files, offline."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from traincheck_agent.cli.errors import fail
from traincheck_agent.terminal_text import write_line

DEFAULT_OUT = Path("traincheck_check")
EXIT_VIOLATIONS = 1
GROUPS_SHOWN = 10


def add_parser(commands: Any) -> None:
    check = commands.add_parser(
        "check",
        help="check traces against invariants",
        description="Check collected traces against one or more invariants files. Every "
        "violation goes to violations-<rank>.jsonl under --out (the same records as check mode "
        "writes while training) and to stderr (at most 3 lines per invariant); the ranked groups, "
        "likely root cause first, are printed at the end. Exit status: 0 no violation, "
        "1 violations, 2 bad input.",
    )
    check.add_argument("paths", nargs="+", metavar="TRACE", help="trace files or directories")
    check.add_argument("-i", "--invariants", action="append", type=Path, required=True,
                       metavar="FILE", help="invariants file (repeat for several); 'builtin' for the "
                       "built-in pack of library invariants")
    check.add_argument("--out", type=Path, default=DEFAULT_OUT,
                       help=f"directory for violations-<rank>.jsonl (default ./{DEFAULT_OUT}); "
                       "violations files already there are replaced")
    check.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="show a progress bar on stderr (default: when stderr is a terminal)")
    check.add_argument("--waive", type=Path, default=None, metavar="WAIVERS",
                       help="waivers file (docs/waivers.md): the violations it covers are written marked "
                       "as waived, not shown, and do not make the exit status 1")
    check.set_defaults(handler=run_check)


def _load_invariants(files: list[Path]) -> dict[str, Any]:
    from traincheck_agent.inference import pack
    from traincheck_agent.inference.invariant import read_invariants
    from traincheck_agent.messages import say

    by_id: dict[str, Any] = {}
    for named in files:
        path = pack.resolve(named)
        for inv in read_invariants(path):
            by_id.setdefault(inv.id, inv)
        mismatch = pack.torch_mismatch(pack.pack_header(path)) if pack.is_builtin(named) else ""
        if mismatch:
            say(mismatch)
    return by_id


def _clear_old(out: Path) -> None:
    from traincheck_agent.report.violations import VIOLATIONS_GLOB

    for old in out.glob(VIOLATIONS_GLOB):
        if old.is_file():
            old.unlink()


def run_check(args: argparse.Namespace) -> int:
    from traincheck_agent.check.offline import check_offline, rank_of, run_header, trace_headers
    from traincheck_agent.check.waivers import (
        WaiverFileError,
        read_waivers,
        stale_line,
        waived_mark,
    )
    from traincheck_agent.cli.progress import ProgressBar
    from traincheck_agent.inference.coverage import Coverage
    from traincheck_agent.inference.invariant import InvariantFileError
    from traincheck_agent.output_files import make_output_dir
    from traincheck_agent.report.triage import judged_counts, triage
    from traincheck_agent.report.violations import ViolationLog, coverage_record, violation_record
    from traincheck_agent.trace.reader import TraceFormatError, find_trace_files

    try:
        invariants = _load_invariants(args.invariants)
    except InvariantFileError as exc:
        return fail(str(exc))
    try:
        waivers = read_waivers(args.waive) if args.waive is not None else None
    except WaiverFileError as exc:
        return fail(str(exc))
    try:
        files = find_trace_files(args.paths)
        if not files:
            return fail(f"no trace files under {' '.join(map(str, args.paths))}")
        headers = trace_headers(files)
        files = [path for path in files if path.name in headers]
        if not files:
            return fail(f"no readable trace files under {' '.join(map(str, args.paths))}")
    except (FileNotFoundError, TraceFormatError) as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"{exc.filename or ''}: {exc.strerror or exc}")
    try:
        make_output_dir(args.out)
        _clear_old(args.out)
    except OSError as exc:
        return fail(f"{args.out}: cannot write violations there: {exc.strerror or exc}")

    started = time.perf_counter()
    bar = ProgressBar("checking", enabled=args.progress)
    try:
        coverage = Coverage()
        violations = check_offline(invariants.values(), files, bar.update, coverage)
    except (FileNotFoundError, TraceFormatError) as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"{exc.filename or ''}: {exc.strerror or exc}")
    finally:
        bar.close()

    logs: dict[int, ViolationLog] = {}
    records = []
    waived = 0
    now = time.time_ns()
    for violation in violations:
        rank = rank_of(violation, headers)
        header = run_header(rank, violation, headers)
        waiver = waivers.match(violation) if waivers is not None else None
        record = violation_record(violation, invariants.get(violation["invariant"]), rank=rank,
                                  run_id=header.get("run_id"), host=header.get("host"),
                                  pid=header.get("pid"), timestamp_ns=now,
                                  waived=None if waiver is None or waivers is None
                                  else waived_mark(waiver, waivers.path))
        if rank not in logs:
            logs[rank] = ViolationLog(args.out, rank)
        logs[rank].report(record)
        if waiver is None:
            records.append(record)
        else:
            waived += 1
    covered = coverage.summary(invariants)
    if covered or coverage.judged.broken:
        rank = min(logs) if logs else rank_of({}, headers)
        header = run_header(rank, {}, headers)
        if rank not in logs:
            logs[rank] = ViolationLog(args.out, rank)
        logs[rank].stats(coverage_record(coverage.to_json(), covered, rank=rank, run_id=header.get("run_id"),
                                         host=header.get("host")))
    if waivers is not None and waivers.entries:
        from traincheck_agent.report.violations import waivers_record

        rank = min(logs) if logs else rank_of({}, headers)
        header = run_header(rank, {}, headers)
        if rank not in logs:
            logs[rank] = ViolationLog(args.out, rank)
        logs[rank].stats(waivers_record(waivers.tally(), rank=rank, run_id=header.get("run_id"),
                                        host=header.get("host")))
    for log in logs.values():
        log.close()
    took = time.perf_counter() - started

    out = sys.stdout
    from traincheck_agent.report.sentences import plural

    write_line(out, f"checked {plural(len(files), 'trace file')} against {plural(len(invariants), 'invariant')} "
               f"in {took:.2f} s")
    if covered:
        write_line(out, covered)
    if waivers is not None:
        write_line(out, f"{waived} violations waived by {waivers.path} (written to the violations files, "
                   "marked as waived)")
        for waiver in waivers.stale():
            write_line(out, stale_line(waiver, waivers.path, "in these traces"))
    if not records:
        write_line(out, "no violations")
        return 0
    groups = triage(records, invariants, judged_counts([{"rank": 0, "coverage": coverage.to_json()}]))
    files_written = ", ".join(str(log.path) for _, log in sorted(logs.items()))
    write_line(out, f"{plural(len(records), 'violation')} of "
               f"{plural(len({r['invariant'] for r in records}), 'invariant')} "
               f"in {plural(len(groups), 'group')} -> {files_written}")
    print_groups(groups, out)
    return EXIT_VIOLATIONS


def print_groups(groups: list[Any], out: TextIO, limit: int = GROUPS_SHOWN) -> None:
    """The ranked groups, likely root cause first, a few lines each: the group's sentence, its
    hint, the variables as patterns with counts, the groups of the same likely cause, and what
    it is about. A group that shares its hint and steps with an earlier one is shown under it."""
    from traincheck_agent.report.sentences import plural

    write_line(out, "groups, likely root cause first:")
    shown = 0
    for number, group in enumerate(groups, start=1):
        if group.same_cause_as is not None:
            continue
        if shown == limit:
            break
        shown += 1
        write_line(out, f"{number:3d}. {group.sentence}")
        if group.hint:
            write_line(out, f"     hint: {group.hint}")
        if group.patterns and len(group.variables) > 1:
            write_line(out, "     variables: " + ", ".join(f"{p} ({n})" for p, n in group.patterns))
        for other_number, other in enumerate(groups, start=1):
            if other.same_cause_as == number:
                write_line(out, f"     also #{other_number}: {other.sentence} ({other.relation})")
        ranks = ("rank " if len(group.ranks) == 1 else "ranks ") + (",".join(map(str, group.ranks)) or "-")
        write_line(out, f"     {plural(group.count, 'violation')}, {ranks}; {group.relation} "
                   f"{group.subject}; invariant {', '.join(group.invariants)}")
        if group.expected:
            write_line(out, f"     expected: {group.expected}")
        write_line(out, f"     {group.rank_reason}")
    unshown = len([g for g in groups if g.same_cause_as is None]) - shown
    if unshown > 0:
        write_line(out, f"... {plural(unshown, 'more group')} (traincheck report <out dir> shows all)")
