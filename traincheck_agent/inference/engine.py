"""Run every relation over the examples of a set of traces, and check invariants offline."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from traincheck_agent.inference.examples import ExampleSet, collect_examples
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.relations import state_transition

RELATIONS = {state_transition.RELATION: state_transition}


def infer_invariants(paths: Iterable[str | Path]) -> tuple[list[Invariant], ExampleSet]:
    """Invariants that hold in every given trace (examples of all traces are merged, so an
    invariant broken in one clean reference is not emitted)."""
    examples = collect_examples(paths)
    invariants: list[Invariant] = []
    for module in RELATIONS.values():
        invariants.extend(module.infer(examples))
    return sorted(invariants, key=lambda i: i.id), examples


def check_offline(invariants: Iterable[Invariant], paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Violations of ``invariants`` in the traces at ``paths`` (one dict per failing example)."""
    examples = collect_examples(paths)
    violations = []
    for inv in invariants:
        module = RELATIONS.get(inv.relation)
        if module is None:
            continue
        for example in module.check(inv, examples):
            violations.append({
                "invariant": inv.id,
                "relation": inv.relation,
                "step": example.step,
                "variable": example.var,
                "trace": example.trace,
                "message": f"{inv.description}: violated by {example.var} at step {example.step} "
                           f"({example.attribute}: {example.before_class} -> {example.after_class}, "
                           f"{'changed' if example.changed else 'unchanged'})",
            })
    return violations
