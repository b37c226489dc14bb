"""Run every relation over a set of traces, and check invariants offline.

Examples of all the given traces are merged before any hypothesis is judged, so an invariant
that one clean reference breaks is not emitted.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from traincheck_agent.inference.examples import ExampleSet, collect_examples
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.relations import (
    context_argument,
    cross_rank,
    distinct_argument,
    output_dtype,
    state_transition,
)
from traincheck_agent.trace.reader import find_trace_files


def infer_invariants(paths: Iterable[str | Path]) -> tuple[list[Invariant], ExampleSet]:
    files = find_trace_files(paths)
    examples = collect_examples(files)
    invariants = state_transition.infer(examples)
    invariants += cross_rank.infer_from_groups(cross_rank.collect(files), tuple(sorted(p.name for p in files)))
    invariants += output_dtype.infer_from_groups(output_dtype.collect(files))
    invariants += distinct_argument.infer_from_groups(distinct_argument.collect(files))
    invariants += context_argument.infer_from_groups(context_argument.collect(files))
    return sorted(invariants, key=lambda i: i.id), examples


def check_offline(invariants: Iterable[Invariant], paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Violations of ``invariants`` in the traces at ``paths``, earliest step first."""
    files = find_trace_files(paths)
    invariants = list(invariants)
    violations: list[dict[str, Any]] = []
    if any(i.relation == state_transition.RELATION for i in invariants):
        examples = collect_examples(files)
        for inv in (i for i in invariants if i.relation == state_transition.RELATION):
            for ex in state_transition.check(inv, examples):
                violations.append({
                    "invariant": inv.id, "relation": inv.relation, "step": ex.step, "variable": ex.var,
                    "trace": ex.trace,
                    "message": f"{inv.description}: violated by {ex.var} at step {ex.step} ({ex.attribute}: "
                               f"{ex.before_class} -> {ex.after_class}, {'changed' if ex.changed else 'unchanged'})",
                })
    if any(i.relation == cross_rank.RELATION for i in invariants):
        groups = cross_rank.collect(files)
        for inv in (i for i in invariants if i.relation == cross_rank.RELATION):
            for ex in cross_rank.check(inv, groups):
                violations.append({
                    "invariant": inv.id, "relation": inv.relation, "step": ex.step, "variable": ex.var,
                    "ranks": list(ex.ranks),
                    "message": f"{inv.description}: {ex.var} differs across ranks {list(ex.ranks)} "
                               f"at step {ex.step} ({ex.where})",
                })
    if any(i.relation == output_dtype.RELATION for i in invariants):
        calls = output_dtype.collect(files)
        for inv in (i for i in invariants if i.relation == output_dtype.RELATION):
            for ex in output_dtype.check(inv, calls):
                violations.append({
                    "invariant": inv.id, "relation": inv.relation, "step": ex.step, "api": ex.api,
                    "variable": "", "trace": ex.trace,
                    "message": f"{inv.description}: {ex.api} returned {ex.dtype} at step {ex.step}",
                })
    if any(i.relation == distinct_argument.RELATION for i in invariants):
        arg_groups = distinct_argument.collect(files)
        for inv in (i for i in invariants if i.relation == distinct_argument.RELATION):
            for ex in distinct_argument.check(inv, arg_groups):
                violations.append({
                    "invariant": inv.id, "relation": inv.relation, "step": ex.step, "api": ex.api,
                    "variable": ex.name, "trace": ex.trace,
                    "message": f"{inv.description}: {ex.api} received the same parameter "
                               f"{ex.name or f'(object {ex.oid})'} again at step {ex.step}",
                })
    if any(i.relation == context_argument.RELATION for i in invariants):
        flag_groups = context_argument.collect(files)
        for inv in (i for i in invariants if i.relation == context_argument.RELATION):
            for ex in context_argument.check(inv, flag_groups):
                violations.append({
                    "invariant": inv.id, "relation": inv.relation, "step": ex.step, "api": ex.api,
                    "variable": "", "trace": ex.trace,
                    "message": f"{inv.description}: called with {ex.argument}={ex.value} at step {ex.step} "
                               f"(phase {ex.feature_map().get('phase')})",
                })
    return sorted(violations, key=lambda v: (v["step"], v["invariant"], v["variable"]))
