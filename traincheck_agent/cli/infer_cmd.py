"""``traincheck infer`` and ``traincheck invariants show``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from traincheck_agent.cli import waive_cmd
from traincheck_agent.cli.errors import fail
from traincheck_agent.terminal_text import write_line
from traincheck_agent.trace.reader import TraceFormatError


def add_parser(commands: Any) -> None:
    infer = commands.add_parser(
        "infer",
        help="learn invariants from clean traces",
        description="Learn invariants from one or more clean reference traces. An invariant "
        "broken in any of them is not emitted. With --update FILE, learn from the traces FILE was "
        "learned from plus the new ones (the same invariants as a fresh infer over all of them), "
        "and say which invariants were removed, narrowed, widened or added, and why. FILE records "
        "where its traces are, relative to itself, with a digest of each: a trace that moved or "
        "changed, or a file written before paths were recorded, needs --references.",
    )
    infer.add_argument("paths", nargs="+", metavar="PATH", help="trace files or directories (with --update: the new ones)")
    infer.add_argument("-o", "--output", type=Path, default=None,
                       help="invariants file to write (default invariants.json; with --update, FILE itself)")
    infer.add_argument("--update", type=Path, default=None, metavar="FILE",
                       help="re-learn FILE's invariants with the new traces PATH... added to its references")
    infer.add_argument("--references", nargs="+", action="extend", default=None, metavar="PATH",
                       help="with --update: the traces FILE was learned from, when it cannot find them "
                            "(give the new traces first, or repeat the option)")
    infer.add_argument("--json", action="store_true",
                       help="with --update: print the changes as one JSON object instead of lines")
    infer.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="show a progress bar on stderr (default: when stderr is a terminal)")
    infer.add_argument("--ranks", type=rank_set, default=None, metavar="LIST",
                       help="only the traces of these ranks, e.g. 0-7,16 (cross-rank invariants are "
                            "learned among them: pick whole process groups)")
    infer.set_defaults(handler=run_infer)

    invariants = commands.add_parser("invariants", help="inspect invariants files",
                                     description="Inspect invariants files.")
    invariants.set_defaults(help_parser=invariants)
    sub = invariants.add_subparsers(dest="invariants_command", metavar="SUBCOMMAND")
    show = sub.add_parser("show", help="list the invariants of a file",
                          description="List the invariants of a file, one per line.")
    show.add_argument("file", type=Path, help="invariants file (or builtin: the built-in pack)")
    show.add_argument("--relation", help="only this relation")
    show.add_argument("--api", help="only invariants about this API / event (substring)")
    show.set_defaults(handler=run_show)
    waive_cmd.add_parser(sub)


def rank_set(text: str) -> frozenset[int]:
    """``0-3,8`` -> {0, 1, 2, 3, 8}."""
    ranks: set[int] = set()
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            lo, hi = int(first), int(last or first)
            if lo < 0 or hi < lo:
                raise ValueError
            ranks.update(range(lo, hi + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of ranks: {text!r} (e.g. 0-7,16)") from None
    return frozenset(ranks)


def _readable_traces(paths: list[str]) -> tuple[list[Path], list[Path]]:
    """The trace files under ``paths``, and those of them with at least a header. A file with no complete line (its
    process was killed before the first write ended) is left out with a warning, as ``check``
    and ``trace summary`` do; any other damage raises TraceFormatError."""
    from traincheck_agent.messages import warn
    from traincheck_agent.trace.reader import EmptyTraceError, TraceFile, find_trace_files

    found, readable = find_trace_files(paths), []
    for path in found:
        try:
            _ = TraceFile(path).header
        except EmptyTraceError as exc:
            warn(f"{exc}; file skipped")
            continue
        readable.append(path)
    return found, readable


def readable_traces_or_problem(paths: list[str]) -> tuple[list[Path], str]:
    """``_readable_traces`` for a command: the readable trace files, or what is wrong with
    ``paths`` in words (for ``fail``) when there are none or one cannot be read."""
    try:
        found, readable = _readable_traces(paths)
    except (FileNotFoundError, TraceFormatError) as exc:
        return [], str(exc)
    except OSError as exc:
        return [], f"{exc.filename or ''}: {exc.strerror or exc}"
    if not readable:
        return [], f"no {'readable ' if found else ''}trace files under {' '.join(paths)}"
    return readable, ""


def run_infer(args: argparse.Namespace) -> int:
    from traincheck_agent.cli.progress import ProgressBar
    from traincheck_agent.inference.engine import InferenceFacts, infer_invariants
    from traincheck_agent.inference.invariant import write_invariants
    from traincheck_agent.inference.references import describe

    if args.update is not None:
        from traincheck_agent.cli.infer_update import run_update

        return run_update(args)
    if args.references is not None or args.json:
        return fail("--references and --json go with --update FILE")
    args.output = args.output or Path("invariants.json")
    started = time.perf_counter()
    readable, problem = readable_traces_or_problem(args.paths)
    if problem:
        return fail(problem)
    bar = ProgressBar("inferring", enabled=args.progress)
    facts = InferenceFacts()
    try:
        invariants, files = infer_invariants(readable, lambda done, total: bar.update(done, total, "reading traces"),
                                             ranks=args.ranks, facts=facts)
    except (FileNotFoundError, TraceFormatError) as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"{exc.filename or ''}: {exc.strerror or exc}")
    finally:
        bar.close()
    if not files:
        of_ranks = "" if args.ranks is None else " of the ranks asked for"
        return fail(f"no trace files{of_ranks} under {' '.join(args.paths)}")
    try:
        write_invariants(invariants, args.output, [f.name for f in files], describe(files, args.output))
    except OSError as exc:
        return fail(f"{args.output}: cannot write the invariants file: {exc.strerror or exc}")
    took = time.perf_counter() - started
    _tell_what_was_missing(facts)
    write_line(sys.stdout, f"{len(invariants)} invariants from {len(files)} trace file(s) "
               f"in {took:.2f} s -> {args.output}")
    return 0


def _tell_what_was_missing(facts: Any) -> None:
    """On stderr: traces too short to learn about steps from, and the relations that learned
    nothing, each with why (``InferenceFacts``)."""
    from traincheck_agent.messages import say, warn

    for label, steps in facts.short_traces().items():
        warn(f"{label} shows {steps} training step(s); invariants about steps need at least 2 "
             "(a step ends at optimizer.step: does the loop call an optimizer, and run long enough?)")
    for relation, why in facts.nothing_learned():
        say(f"{relation}: nothing learned; {why}")


def run_show(args: argparse.Namespace) -> int:
    from traincheck_agent.inference.invariant import InvariantFileError, read_invariants
    from traincheck_agent.inference.pack import resolve

    try:
        invariants = read_invariants(resolve(args.file))
    except InvariantFileError as exc:
        return fail(str(exc))
    shown = 0
    for inv in invariants:
        if args.relation and inv.relation != args.relation:
            continue
        if args.api and args.api not in str(inv.subject.get("event", inv.subject.get("api", ""))):
            continue
        support = inv.support.get("passing", 0)
        write_line(sys.stdout, f"{inv.id}  {inv.relation:16s}  {inv.description}  [{support} examples]")
        shown += 1
    write_line(sys.stdout, f"{shown} of {len(invariants)} invariants")
    return 0
