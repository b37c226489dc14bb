"""Run every relation over a set of traces, and check invariants offline.

Each relation module has the same shape: ``RELATION`` (its name), ``collect(files)`` (its
examples, streamed from the traces), ``infer(examples, sources)`` (hypothesise, split passing
from failing, deduce preconditions), ``check(invariant, examples)`` (the failing examples) and
``violation(invariant, example)`` (one violation record). Examples of all the given traces are
merged before any hypothesis is judged, so an invariant that one clean reference breaks is not
emitted.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.relations import (
    api_sequence,
    context_argument,
    cross_rank,
    distinct_argument,
    output_dtype,
    state_transition,
    threshold,
)
from traincheck_agent.trace.reader import find_trace_files

RELATIONS = (state_transition, cross_rank, output_dtype, distinct_argument, context_argument, api_sequence,
             threshold)


def infer_invariants(paths: Iterable[str | Path]) -> tuple[list[Invariant], list[Path]]:
    """The invariants that hold in every trace under ``paths``, and the trace files read."""
    files = find_trace_files(paths)
    sources = tuple(sorted(p.name for p in files))
    invariants: list[Invariant] = []
    for relation in RELATIONS:
        invariants += relation.infer(relation.collect(files), sources)
    return sorted(invariants, key=lambda i: i.id), files


def check_offline(invariants: Iterable[Invariant], paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Violations of ``invariants`` in the traces at ``paths``, earliest step first."""
    files = find_trace_files(paths)
    by_relation: dict[str, list[Invariant]] = {}
    for inv in invariants:
        by_relation.setdefault(inv.relation, []).append(inv)
    violations: list[dict[str, Any]] = []
    for relation in RELATIONS:
        wanted = by_relation.get(relation.RELATION)
        if not wanted:
            continue
        examples = relation.collect(files)
        for inv in wanted:
            for example in relation.check(inv, examples):
                violations.append({"invariant": inv.id, "relation": inv.relation, **relation.violation(inv, example)})
    return sorted(violations, key=lambda v: (v["step"], v["invariant"], v.get("variable", "")))
