"""Invariants over a pool of per-parameter examples that hold or not, each scoped by the
preconditions that separate the passing examples from the failing ones: what the model-level
relations (GradApplied, GradCleared) learn."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import (
    deduce_scopes,
    domain_of,
    enough_support,
    with_condition,
)


class ParameterExample(Protocol):
    @property
    def var(self) -> str: ...

    @property
    def step(self) -> int: ...

    @property
    def trace(self) -> str: ...

    def feature_map(self) -> dict[str, Any]: ...


def scoped_invariants(group: Sequence[ParameterExample], holds: Callable[[Any], bool], *, relation: str,
                      subject: dict[str, Any], description: str, sources: tuple[str, ...],
                      domain_fields: tuple[str, ...], min_passing: int, min_steps: int) -> list[Invariant]:
    """One invariant per precondition scope over ``group`` (the examples that decide: ``holds``
    is True or False for each), with at least ``min_passing`` passing examples over
    ``min_steps`` steps."""
    passing = [e for e in group if holds(e)]
    if len(passing) < min_passing or len({e.step for e in passing}) < min_steps:
        return []
    features = [e.feature_map() for e in passing]
    invariants = []
    for scope in deduce_scopes(features, [e.feature_map() for e in group if not holds(e)],
                               [e.trace for e in passing]):
        kept = [passing[i] for i in scope.passing]
        if not enough_support([e.step for e in kept], min_passing, min_steps):
            continue
        invariants.append(Invariant(
            relation=relation,
            subject=subject,
            precondition=tuple(scope.precondition),
            support={"passing": len(kept), "excluded": len(group) - len(kept),
                     "steps": len({e.step for e in kept}), "variables": len({e.var for e in kept})},
            description=with_condition(description, scope.precondition),
            sources=sources,
            domain=domain_of([features[i] for i in scope.passing], domain_fields),
        ))
    return invariants
