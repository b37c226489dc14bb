"""Checking collected traces after the run: the collectors and the verdicts of check mode
(``check.online``), fed whole trace files, and the rank and run each violation belongs to."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from traincheck_agent.inference import relations
from traincheck_agent.inference.coverage import Coverage
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.stream import check, collect_all
from traincheck_agent.messages import warn
from traincheck_agent.trace.reader import (
    EmptyTraceError,
    Progress,
    TraceFile,
    find_trace_files,
    reading_with_progress,
)

_RANK_IN_NAME = re.compile(r"_rank(\d+)_")


def check_offline(invariants: Iterable[Invariant], paths: Iterable[str | Path],
                  progress: Progress | None = None, coverage: Coverage | None = None) -> list[dict[str, Any]]:
    """Violations of ``invariants`` in the traces at ``paths``, earliest step first; examples
    outside an invariant's domain are not judged, and counted in ``coverage`` when given."""
    files = find_trace_files(paths)
    by_relation: dict[str, list[Invariant]] = {}
    for inv in invariants:
        by_relation.setdefault(inv.relation, []).append(inv)
    wanted = relations.load(by_relation)
    with reading_with_progress(files, progress):
        examples = collect_all(wanted, files)
    violations: list[dict[str, Any]] = []
    for relation in wanted:
        for inv in by_relation[relation.RELATION]:
            for example in check(relation, inv, examples[relation.RELATION], coverage):
                violations.append({"invariant": inv.id, "relation": inv.relation, **relation.violation(inv, example)})
    return sorted(violations, key=lambda v: (v["step"], v["invariant"], v.get("variable", "")))


def trace_headers(files: Iterable[Path]) -> dict[str, dict[str, Any]]:
    """Header of each trace by file name. A file with no complete line (its process was killed
    before the first write ended) is left out with a warning, as ``trace summary`` does."""
    headers = {}
    for path in files:
        try:
            headers[path.name] = TraceFile(path).header
        except EmptyTraceError as exc:
            warn(f"{exc}; file skipped")
    return headers


def rank_of(violation: dict[str, Any], headers: dict[str, dict[str, Any]]) -> int:
    """The rank whose trace shows the violation; for a cross-rank violation, the lowest rank
    involved (all of them are in the record's ``ranks``)."""
    header = headers.get(str(violation.get("trace", "")))
    if header is not None and isinstance(header.get("rank"), int):
        return header["rank"]
    match = _RANK_IN_NAME.search(str(violation.get("trace", "")))
    if match:
        return int(match.group(1))
    ranks = [r for r in violation.get("ranks") or [] if isinstance(r, int)]
    return min(ranks) if ranks else 0


def run_header(rank: int, violation: dict[str, Any], headers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The header of the trace that shows the violation, else of a trace of ``rank``."""
    header = headers.get(str(violation.get("trace", "")))
    if header is None:
        header = next((h for h in headers.values() if h.get("rank") == rank), {})
    return header
