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
    from traincheck_agent.cli.progress import ProgressBar
    from traincheck_agent.inference.coverage import Coverage
    from traincheck_agent.inference.invariant import InvariantFileError
    from traincheck_agent.output_files import make_output_dir
    from traincheck_agent.report.triage import triage
    from traincheck_agent.report.violations import ViolationLog, coverage_record, violation_record
    from traincheck_agent.trace.reader import TraceFormatError, find_trace_files

    try:
        invariants = _load_invariants(args.invariants)
    except InvariantFileError as exc:
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
    now = time.time_ns()
    for violation in violations:
        rank = rank_of(violation, headers)
        header = run_header(rank, violation, headers)
        record = violation_record(violation, invariants.get(violation["invariant"]), rank=rank,
                                  run_id=header.get("run_id"), host=header.get("host"),
                                  pid=header.get("pid"), timestamp_ns=now)
        if rank not in logs:
            logs[rank] = ViolationLog(args.out, rank)
        logs[rank].report(record)
        records.append(record)
    covered = coverage.summary(invariants)
    if covered:
        rank = min(logs) if logs else rank_of({}, headers)
        header = run_header(rank, {}, headers)
        if rank not in logs:
            logs[rank] = ViolationLog(args.out, rank)
        logs[rank].stats(coverage_record(coverage.to_json(), covered, rank=rank, run_id=header.get("run_id"),
                                         host=header.get("host")))
    for log in logs.values():
        log.close()
    took = time.perf_counter() - started

    out = sys.stdout
    write_line(out, f"checked {len(files)} trace file(s) against {len(invariants)} invariants in {took:.2f} s")
    if covered:
        write_line(out, covered)
    if not records:
        write_line(out, "no violations")
        return 0
    groups = triage(records, invariants)
    files_written = ", ".join(str(log.path) for _, log in sorted(logs.items()))
    write_line(out, f"{len(records)} violations of {len({r['invariant'] for r in records})} invariants "
               f"in {len(groups)} groups -> {files_written}")
    print_groups(groups, out)
    return EXIT_VIOLATIONS


def print_groups(groups: list[Any], out: TextIO, limit: int = GROUPS_SHOWN) -> None:
    """The ranked groups, likely root cause first, a few lines each."""
    from traincheck_agent.report.violations import what_happened

    write_line(out, "groups, likely root cause first:")
    for number, group in enumerate(groups[:limit], start=1):
        steps = (f"step {group.first_step}" if group.first_step == group.last_step
                 else f"steps {group.first_step}-{group.last_step}")
        ranks = ",".join(map(str, group.ranks)) or "-"
        where = group.pattern or ", ".join(a for a in group.apis if a != group.subject)
        title = f"{group.relation} {group.subject}" + (f": {where}" if where else "")
        write_line(out, f"{number:3d}. {title}  {steps}, {group.count} violations, ranks {ranks}")
        if group.expected:
            write_line(out, f"     expected: {group.expected}")
        example = group.example
        write_line(out, f"     e.g. rank {example.get('rank')} step {example.get('step')}: {what_happened(example)}")
        write_line(out, f"     invariant {', '.join(group.invariants)}; {group.rank_reason}")
    if len(groups) > limit:
        write_line(out, f"... {len(groups) - limit} more groups (traincheck report <out dir> shows all)")
