"""What a set of trace files holds, per run and rank: a quick check that collection worked.

Files are streamed one record at a time, so a summary costs memory in the number of distinct
APIs, variables and steps, not in the size of the traces.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traincheck_agent.messages import warn
from traincheck_agent.terminal_text import visible
from traincheck_agent.trace.reader import EmptyTraceError, TraceFile, find_trace_files
from traincheck_agent.trace.schema import KIND_CALL, KIND_HEADER, KIND_PROCESS, KIND_STATE

UNKNOWN_RANK = -1
_TOP_N = 15  # rows per detail list in the text form


@dataclass
class _Acc:
    """Counts for one (run, rank); also used for one file before its final rank is known."""

    files: list[str] = field(default_factory=list)
    pids: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    world_size: int | None = None
    kinds: Counter = field(default_factory=Counter)
    calls: Counter = field(default_factory=Counter)
    states: Counter = field(default_factory=Counter)
    phases: Counter = field(default_factory=Counter)
    steps: set[int] = field(default_factory=set)

    def merge(self, other: _Acc) -> None:
        self.files.extend(other.files)
        self.pids |= other.pids
        self.hosts |= other.hosts
        if other.world_size is not None:
            self.world_size = other.world_size
        self.kinds.update(other.kinds)
        self.calls.update(other.calls)
        self.states.update(other.states)
        self.phases.update(other.phases)
        self.steps |= other.steps

    def as_dict(self) -> dict[str, Any]:
        steps = self.steps
        return {
            "files": sorted(self.files),
            "pids": sorted(self.pids),
            "hosts": sorted(self.hosts),
            "world_size": self.world_size,
            "records": _by_count(self.kinds),
            "calls": _by_count(self.calls),
            "states": _by_count(self.states),
            "phases": _by_count(self.phases),
            "steps": {
                "min": min(steps) if steps else None,
                "max": max(steps) if steps else None,
                "distinct": len(steps),
            },
        }


def _by_count(counter: Counter) -> dict[str, int]:
    """Most frequent first, then by name: the order a reader wants to see."""
    return dict(sorted(counter.items(), key=lambda kv: (-kv[1], str(kv[0]))))


def _int_or(value: Any, default: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _summarize_file(trace: TraceFile) -> tuple[str, int, _Acc]:
    header = trace.header
    run_id = str(header.get("run_id", "unknown"))
    rank = _int_or(header.get("rank"), UNKNOWN_RANK)
    acc = _Acc(files=[str(trace.path)], world_size=_int_or(header.get("world_size"), None))
    if _int_or(header.get("pid"), None) is not None:
        acc.pids.add(header["pid"])
    if header.get("host"):
        acc.hosts.add(str(header["host"]))
    acc.kinds[KIND_HEADER] += 1
    for record in trace.records():
        kind = record.get("kind")
        acc.kinds[str(kind)] += 1
        if kind == KIND_CALL:
            acc.calls[str(record.get("api"))] += 1
        elif kind == KIND_STATE:
            acc.states[str(record.get("var"))] += 1
        elif kind == KIND_PROCESS:
            # The rank may only be learned once torch.distributed is initialised.
            rank = _int_or(record.get("rank"), rank)
            acc.world_size = _int_or(record.get("world_size"), acc.world_size)
            continue
        else:
            continue
        step = _int_or(record.get("step"), None)
        if step is not None and step >= 0:  # -1 marks events before training starts
            acc.steps.add(step)
        phase = record.get("phase")
        if phase is not None:
            acc.phases[str(phase)] += 1
    return run_id, rank if rank is not None else UNKNOWN_RANK, acc


def summarize(paths: Iterable[str | Path]) -> dict[str, Any]:
    """Summarise the trace files under ``paths`` (files or directories).

    Returns ``{"files": n, "skipped": [...], "runs": {run_id: {rank: {...}}}}``; a rank of -1
    means the trace never said. Raises FileNotFoundError for a missing path and
    TraceFormatError for a damaged file; files with no complete line (a process killed before
    its first write finished) are skipped with a warning and listed under ``skipped``.
    """
    runs: dict[str, dict[int, _Acc]] = {}
    skipped: list[dict[str, str]] = []
    files = find_trace_files(paths)
    for path in files:
        try:
            run_id, rank, acc = _summarize_file(TraceFile(path))
        except EmptyTraceError as exc:
            warn(f"{exc}; file skipped")
            skipped.append({"path": str(path), "problem": exc.problem})
            continue
        runs.setdefault(run_id, {}).setdefault(rank, _Acc()).merge(acc)
    return {
        "files": len(files),
        "skipped": skipped,
        "runs": {
            run_id: {rank: ranks[rank].as_dict() for rank in sorted(ranks)}
            for run_id, ranks in sorted(runs.items())
        },
    }


def _steps_text(steps: dict[str, Any]) -> str:
    if not steps["distinct"]:
        return "-"
    return f"{steps['min']}..{steps['max']} ({steps['distinct']})"


def _counts_text(counts: dict[str, int]) -> str:
    return " ".join(f"{name}:{n}" for name, n in counts.items()) or "-"


def _table(rows: list[list[str]]) -> list[str]:
    rows = [[visible(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _detail(title: str, counts: dict[str, int]) -> list[str]:
    if not counts:
        return []
    lines = [f"    {title}:"]
    items = list(counts.items())
    width = len(str(items[0][1]))
    lines += [f"      {n:>{width}}  {name}" for name, n in items[:_TOP_N]]
    if len(items) > _TOP_N:
        lines.append(f"      ... {len(items) - _TOP_N} more")
    return lines


def format_summary(summary: dict[str, Any]) -> str:
    """A text table of ``summarize``'s result, then the busiest APIs and variables per rank;
    control characters in names and run ids are shown escaped, one line per line."""
    header = ["run", "rank", "files", "records", "calls", "states", "steps (distinct)", "phases"]
    rows = [header]
    details: list[str] = []
    for run_id, ranks in summary["runs"].items():
        for rank, info in ranks.items():
            records = info["records"]
            rows.append(
                [
                    run_id,
                    "?" if rank == UNKNOWN_RANK else str(rank),
                    str(len(info["files"])),
                    str(sum(records.values())),
                    str(records.get(KIND_CALL, 0)),
                    str(records.get(KIND_STATE, 0)),
                    _steps_text(info["steps"]),
                    _counts_text(info["phases"]),
                ]
            )
            block = _detail("calls by api", info["calls"])
            block += _detail("states by var", info["states"])
            if block:
                details.append(f"  {run_id} rank {rows[-1][1]}:")
                details.extend(block)
    lines = [f"{summary['files']} trace file(s)"]
    if summary.get("skipped"):
        lines[0] += f", {len(summary['skipped'])} skipped (no complete record)"
    if len(rows) > 1:
        lines += [""] + _table(rows)
    if details:
        lines += [""] + details
    return "".join(visible(line) + "\n" for line in lines)


__all__ = ["UNKNOWN_RANK", "format_summary", "summarize"]
