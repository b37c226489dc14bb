"""``traincheck infer --update FILE NEW...``: fold new clean traces into an invariants file and
say what changed (``inference/update.py`` does the learning and the comparison)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from traincheck_agent.cli.errors import fail
from traincheck_agent.cli.infer_cmd import _tell_what_was_missing, readable_traces_or_problem
from traincheck_agent.terminal_text import write_line
from traincheck_agent.trace.reader import TraceFormatError

MAX_WHAT_CHARS = 160  # of a counterexample's account, on one line


def run_update(args: argparse.Namespace) -> int:
    from traincheck_agent.cli.progress import ProgressBar
    from traincheck_agent.inference.engine import InferenceFacts
    from traincheck_agent.inference.invariant import InvariantFileError, write_invariants
    from traincheck_agent.inference.references import ReferenceTraceError, describe
    from traincheck_agent.inference.update import update_invariants

    started = time.perf_counter()
    output = args.output or args.update
    readable, problem = readable_traces_or_problem(args.paths)
    if problem:
        return fail(problem)
    bar = ProgressBar("updating", enabled=args.progress)
    facts = InferenceFacts()
    try:
        update = update_invariants(args.update, readable, args.references, args.ranks,
                                   lambda done, total: bar.update(done, total, "reading traces"), facts)
    except (InvariantFileError, ReferenceTraceError, FileNotFoundError, TraceFormatError) as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"{exc.filename or ''}: {exc.strerror or exc}")
    finally:
        bar.close()
    _warn_if_other_references(update)
    files = update.learned.files
    try:
        write_invariants(update.learned.invariants, output, [f.name for f in files], describe(files, output))
    except OSError as exc:
        return fail(f"{output}: cannot write the invariants file: {exc.strerror or exc}")
    _tell_what_was_missing(facts)
    if args.json:
        sys.stdout.write(json.dumps(_as_json(update, output), indent=2, ensure_ascii=True, default=str) + "\n")
    else:
        for line in summary_lines(update.changes):
            write_line(sys.stdout, line)
        took = time.perf_counter() - started
        write_line(sys.stdout, f"{len(update.learned.invariants)} invariants (was {len(update.old.invariants)}) "
                   f"from {len(files)} trace file(s), {len(update.new_files)} new, in {took:.2f} s -> {output}")
    return 0


def _warn_if_other_references(update: Any) -> None:
    """When the user named the old references, say if they are not the traces the file names."""
    from traincheck_agent.messages import warn

    recorded = set(update.old.sources)
    given = {f.name for f in update.old_files}
    if not recorded or recorded == given:
        return
    missing, extra = sorted(recorded - given), sorted(given - recorded)
    parts = ([f"not given: {', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}"] if missing else []) + \
            ([f"not among them: {', '.join(extra[:5])}{', ...' if len(extra) > 5 else ''}"] if extra else [])
    warn(f"the references given are not the traces the invariants file was learned from "
         f"({'; '.join(parts)}); monotone merging holds only for the references given")


def summary_lines(changes: list[Any]) -> list[str]:
    """One line per changed invariant, grouped by kind (removed, narrowed, widened, added), each
    group headed by its count; then one line of totals."""
    from traincheck_agent.inference.update import CHANGE_KINDS

    lines = []
    for kind in CHANGE_KINDS:
        group = [c for c in changes if c.kind == kind]
        if not group:
            continue
        lines.append(f"{kind} ({len(group)}):")
        lines += [f"  {_change_line(c)}" for c in group]
    counts = ", ".join(f"{sum(c.kind == kind for c in changes)} {kind}" for kind in CHANGE_KINDS)
    lines.append(f"changes: {counts}" if changes else "changes: none")
    return lines


def _change_line(change: Any) -> str:
    inv = change.old if change.old is not None else change.new[0]
    ids = inv.id if change.old is None or not change.new or change.new[0].id == inv.id else \
        f"{inv.id} -> {', '.join(n.id for n in change.new)}"
    line = f"{ids}  {inv.relation}: {inv.description}"
    if change.kind != "added":
        line += f"; {change.detail}"
    found = change.counterexample
    if found is not None:
        what = found.what if len(found.what) <= MAX_WHAT_CHARS else found.what[:MAX_WHAT_CHARS - 3] + "..."
        about = f", {found.subject}" if found.subject else ""
        line += f"; broken by {found.trace} step {found.step}{about}: {what}"
    return line


def _as_json(update: Any, output: Path) -> dict[str, Any]:
    from traincheck_agent.inference.update import CHANGE_KINDS

    return {
        "output": str(output),
        "invariants": len(update.learned.invariants),
        "previous": len(update.old.invariants),
        "traces": [f.name for f in update.learned.files],
        "new_traces": sorted(f.name for f in update.new_files),
        "counts": {kind: sum(c.kind == kind for c in update.changes) for kind in CHANGE_KINDS},
        "changes": [c.to_json() for c in update.changes],
    }
