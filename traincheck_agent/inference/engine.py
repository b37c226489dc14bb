"""Run every relation over a set of traces, and check invariants offline.

Each relation module has the same shape: ``RELATION`` (its name), ``collect(files)`` (its
examples, streamed from the traces), ``infer(examples, sources)`` (hypothesise, split passing
from failing, deduce preconditions), ``check(invariant, examples)`` (the failing examples) and
``violation(invariant, example)`` (one violation record). Examples of all the given traces are
merged before any hypothesis is judged, so an invariant that one clean reference breaks is not
emitted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.relations import (
    api_sequence,
    context_argument,
    cross_rank,
    cross_rank_values,
    distinct_argument,
    event_contain,
    input_output,
    output_dtype,
    periodic_change,
    state_transition,
    threshold,
)
from traincheck_agent.trace.reader import find_trace_files, reading_session

RELATIONS = (state_transition, cross_rank, output_dtype, distinct_argument, context_argument, api_sequence,
             threshold, periodic_change, event_contain, input_output,
             cross_rank_values)


# Called with (bytes read so far, bytes to read in all, the relation reading).
Progress = Callable[[int, int, str], None]


@contextmanager
def _passes(files: list[Path], relations: int, progress: Progress | None) -> Iterator[list[str]]:
    """A reading session over ``relations`` passes of ``files``; the yielded list holds the
    name of the relation reading, for the progress report."""
    total = sum(p.stat().st_size for p in files) * relations
    done, current = 0, [""]

    def read(nbytes: int) -> None:
        nonlocal done
        done += nbytes
        if progress is not None:
            progress(done, total, current[0])

    with reading_session(read):
        yield current
    if progress is not None:
        progress(total, total, "done")


def infer_invariants(paths: Iterable[str | Path], progress: Progress | None = None
                     ) -> tuple[list[Invariant], list[Path]]:
    """The invariants that hold in every trace under ``paths``, and the trace files read."""
    files = find_trace_files(paths)
    sources = tuple(sorted(p.name for p in files))
    invariants: list[Invariant] = []
    with _passes(files, len(RELATIONS), progress) as current:
        for relation in RELATIONS:
            current[0] = relation.RELATION
            invariants += relation.infer(relation.collect(files), sources)
    return sorted(invariants, key=lambda i: i.id), files


def check_offline(invariants: Iterable[Invariant], paths: Iterable[str | Path],
                  progress: Progress | None = None) -> list[dict[str, Any]]:
    """Violations of ``invariants`` in the traces at ``paths``, earliest step first."""
    files = find_trace_files(paths)
    by_relation: dict[str, list[Invariant]] = {}
    for inv in invariants:
        by_relation.setdefault(inv.relation, []).append(inv)
    violations: list[dict[str, Any]] = []
    wanted_relations = [r for r in RELATIONS if r.RELATION in by_relation]
    with _passes(files, len(wanted_relations), progress) as current:
        for relation in wanted_relations:
            current[0] = relation.RELATION
            examples = relation.collect(files)
            for inv in by_relation[relation.RELATION]:
                for example in relation.check(inv, examples):
                    violations.append({"invariant": inv.id, "relation": inv.relation,
                                       **relation.violation(inv, example)})
    return sorted(violations, key=lambda v: (v["step"], v["invariant"], v.get("variable", "")))
