"""Run every relation over a set of traces, and check invariants offline.

Every relation module implements the streaming interface of ``inference.stream``; each trace
is read once, its records fed to every relation's collector. Examples of all the given traces
are merged before any hypothesis is judged, so an invariant that one clean reference breaks is
not emitted.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from traincheck_agent.inference import relations
from traincheck_agent.inference.coverage import Coverage
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.stream import check, collect_all
from traincheck_agent.trace.reader import TraceFile, find_trace_files, reading_session

RELATIONS = tuple(relations.load())


# Called with (bytes read so far, bytes to read in all).
Progress = Callable[[int, int], None]


@contextmanager
def _reading(files: list[Path], progress: Progress | None) -> Iterator[None]:
    """A reading session over ``files`` that reports its progress."""
    total = sum(p.stat().st_size for p in files)
    done = 0

    def read(nbytes: int) -> None:
        nonlocal done
        done += nbytes
        if progress is not None:
            progress(done, total)

    with reading_session(read):
        yield
    if progress is not None:
        progress(total, total)


def infer_invariants(paths: Iterable[str | Path], progress: Progress | None = None,
                     ranks: Collection[int] | None = None) -> tuple[list[Invariant], list[Path]]:
    """The invariants that hold in every trace under ``paths``, and the trace files read;
    ``ranks``: only the traces of those ranks (cross-rank invariants are learned among them)."""
    files = find_trace_files(paths)
    if ranks is not None:
        wanted = set(ranks)
        files = [f for f in files if TraceFile(f).header.get("rank") in wanted]
    sources = tuple(sorted(p.name for p in files))
    with _reading(files, progress):
        examples = collect_all(RELATIONS, files)
    invariants: list[Invariant] = []
    for relation in RELATIONS:
        invariants += relation.infer(examples[relation.RELATION], sources)
    return sorted(invariants, key=lambda i: i.id), files


def check_offline(invariants: Iterable[Invariant], paths: Iterable[str | Path],
                  progress: Progress | None = None, coverage: Coverage | None = None) -> list[dict[str, Any]]:
    """Violations of ``invariants`` in the traces at ``paths``, earliest step first; examples
    outside an invariant's domain are not judged, and counted in ``coverage`` when given."""
    files = find_trace_files(paths)
    by_relation: dict[str, list[Invariant]] = {}
    for inv in invariants:
        by_relation.setdefault(inv.relation, []).append(inv)
    wanted = [r for r in RELATIONS if r.RELATION in by_relation]
    with _reading(files, progress):
        examples = collect_all(wanted, files)
    violations: list[dict[str, Any]] = []
    for relation in wanted:
        for inv in by_relation[relation.RELATION]:
            for example in check(relation, inv, examples[relation.RELATION], coverage):
                violations.append({"invariant": inv.id, "relation": inv.relation, **relation.violation(inv, example)})
    return sorted(violations, key=lambda v: (v["step"], v["invariant"], v.get("variable", "")))
