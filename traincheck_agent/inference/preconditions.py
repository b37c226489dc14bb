"""Preconditions: the condition under which a hypothesis holds, deduced from its examples.

An example is described by features known before the event (the variable's dtype and
requires_grad, the class of its grad before the call, the phase, framework markings ...).
A clause ``CONSTANT(field = value)`` is a candidate when every passing example has that value.
The precondition is the smallest set of candidates (greedy cover) that every failing example
breaks; when some failing example satisfies every candidate, the examples cannot be separated
and the hypothesis is dropped. Identity-like fields (ids, times, pids, names) are never
features, so they can never become clauses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_MISSING = object()
MAX_CLAUSES = 3


class FeatureExample:
    """Base of every relation's example: ``features`` (name, value) pairs known before the
    event, on which preconditions are deduced and evaluated."""

    features: tuple[tuple[str, Any], ...]

    def feature_map(self) -> dict[str, Any]:
        return dict(self.features)


@dataclass(frozen=True, order=True)
class Clause:
    field: str
    value: Any
    kind: str = "CONSTANT"

    def holds(self, features: dict[str, Any]) -> bool:
        return features.get(self.field, _MISSING) == self.value

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "field": self.field, "value": self.value}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Clause:
        return cls(field=raw["field"], value=raw["value"], kind=raw.get("kind", "CONSTANT"))

    def text(self) -> str:
        return f"{self.field} = {self.value}"


def with_condition(statement: str, clauses: Sequence[Clause]) -> str:
    """``statement``, followed by its precondition in words when there is one."""
    text = " and ".join(c.text() for c in clauses)
    return f"{statement}, when {text}" if text else statement


def holds_all(clauses: Sequence[Clause], features: dict[str, Any]) -> bool:
    return all(c.holds(features) for c in clauses)


def _candidates(passing: Sequence[dict[str, Any]], priority: Sequence[str]) -> list[Clause]:
    first = passing[0]
    rank = {name: i for i, name in enumerate(priority)}
    out = []
    for name in sorted(first, key=lambda n: (rank.get(n, len(rank)), n)):
        value = first[name]
        if all(f.get(name, _MISSING) == value for f in passing[1:]):
            out.append(Clause(name, value))
    return out


def deduce(passing: Sequence[dict[str, Any]], failing: Sequence[dict[str, Any]],
           priority: Sequence[str] = ()) -> list[Clause] | None:
    """The precondition separating ``passing`` from ``failing``; [] when nothing fails;
    None when no conjunction of at most ``MAX_CLAUSES`` candidate clauses separates them.
    Among clauses that exclude equally many failing examples, fields named in ``priority``
    win, in that order."""
    if not passing:
        return None
    if not failing:
        return []
    candidates = _candidates(passing, priority)
    remaining = set(range(len(failing)))
    chosen: list[Clause] = []
    while remaining:
        best, best_killed = None, set()
        for clause in candidates:
            killed = {i for i in remaining if not clause.holds(failing[i])}
            if len(killed) > len(best_killed):
                best, best_killed = clause, killed
        if best is None or len(chosen) == MAX_CLAUSES:
            return None
        chosen.append(best)
        candidates.remove(best)
        remaining -= best_killed
    return sorted(chosen)
