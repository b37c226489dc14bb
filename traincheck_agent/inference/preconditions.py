"""Preconditions: the condition under which a hypothesis holds, deduced from its examples.

An example is described by features known before the event (the variable's dtype and
requires_grad, the class of its grad before the call, the phase, framework markings ...).
A clause is a candidate when every passing example satisfies it: ``CONSTANT`` (they all have
one value), ``EXIST`` (none lacks the field), ``ONE_OF`` (a disjunction of the few values they
have) and ``NOT`` (a value only failing examples have: "except in eval"). The precondition is
the smallest set of candidates (greedy cover, the plainest kind winning ties) that every failing
example breaks; when some failing example satisfies every candidate, the examples cannot be separated
and the hypothesis is dropped. Identity-like fields (ids, times, pids, names) are never
features, so they can never become clauses.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

_MISSING = object()
MAX_CLAUSES = 3


class FeatureExample:
    """Base of every relation's example: ``features`` (name, value) pairs known before the
    event, on which preconditions are deduced and evaluated."""

    features: tuple[tuple[str, Any], ...]

    def feature_map(self) -> dict[str, Any]:
        return dict(self.features)


CONSTANT, EXIST, NOT, ONE_OF = "CONSTANT", "EXIST", "NOT", "ONE_OF"
CONSISTENT, UNEQUAL = "CONSISTENT", "UNEQUAL"
# Also the tie-break order: the plainest clause first.
KINDS = (CONSTANT, EXIST, CONSISTENT, UNEQUAL, NOT, ONE_OF)
# Features of examples made of several parties (ranks) hold one value per party, as a tuple,
# under a name with this prefix; only CONSISTENT and UNEQUAL clauses are made from them.
PARTIES = "parties."
MAX_ONE_OF = 3  # a disjunction of more values than this explains nothing


class Clause(NamedTuple):
    """One condition on an example's features.

    ``CONSTANT``: ``field`` equals ``value``. ``EXIST``: ``field`` is present and not None (e.g.
    inside some autocast context). ``NOT``: ``field`` is anything but ``value`` (``except in
    eval``). ``ONE_OF``: ``field`` is one of the values in the tuple ``value`` (a disjunction).
    On a per-party field (``parties.<name>``, one value per rank): ``CONSISTENT``, every party
    has the same value; ``UNEQUAL``, no two parties share a value (``value`` is None for both).
    """

    field: str
    value: Any
    kind: str = CONSTANT

    def holds(self, features: dict[str, Any]) -> bool:
        got = features.get(self.field, _MISSING)
        if self.kind == CONSTANT:
            return got == self.value
        if self.kind == EXIST:
            return got is not _MISSING and got is not None
        if self.kind == NOT:
            return got != self.value
        if self.kind in (CONSISTENT, UNEQUAL):
            if not isinstance(got, (tuple, list)) or not got:
                return False
            distinct = len(set(got))
            return distinct == 1 if self.kind == CONSISTENT else distinct == len(got)
        return got in self.value

    def sort_key(self) -> tuple[str, int, str]:
        return self.field, KINDS.index(self.kind), repr(self.value)

    def to_json(self) -> dict[str, Any]:
        value = list(self.value) if self.kind == ONE_OF else self.value
        return {"kind": self.kind, "field": self.field, "value": value}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Clause:
        kind = raw.get("kind", CONSTANT)
        if kind not in KINDS:
            raise ValueError(f"unknown clause kind {kind!r} (known: {', '.join(KINDS)})")
        value = raw["value"]
        if kind == ONE_OF:
            if not isinstance(value, list):
                raise ValueError("a ONE_OF clause needs a list of values")
            value = tuple(value)
        return cls(field=raw["field"], value=value, kind=kind)

    def text(self) -> str:
        if self.kind == EXIST:
            return f"{self.field} is set"
        if self.kind == CONSISTENT:
            return f"{self.field.removeprefix(PARTIES)} is the same on every rank"
        if self.kind == UNEQUAL:
            return f"{self.field.removeprefix(PARTIES)} differs between ranks"
        if self.kind == NOT:
            return f"{self.field} != {self.value}"
        if self.kind == ONE_OF:
            return f"{self.field} in [{', '.join(map(str, self.value))}]"
        return f"{self.field} = {self.value}"


def ordered(clauses: Iterable[Clause]) -> list[Clause]:
    """Clauses in their canonical order (by field, then kind, then value)."""
    return sorted(clauses, key=Clause.sort_key)


def with_condition(statement: str, clauses: Sequence[Clause]) -> str:
    """``statement``, followed by its precondition in words when there is one."""
    text = " and ".join(c.text() for c in clauses)
    return f"{statement}, when {text}" if text else statement


def holds_all(clauses: Sequence[Clause], features: dict[str, Any]) -> bool:
    return all(c.holds(features) for c in clauses)


def holds_locally(clauses: Sequence[Clause], features: dict[str, Any]) -> bool:
    """Whether the clauses can hold for an example of several parties, given one party's own
    features: the ``parties.*`` clauses need every party and count as holding."""
    return all(c.field.startswith(PARTIES) or c.holds(features) for c in clauses)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _candidates(passing: Sequence[dict[str, Any]], failing: Sequence[dict[str, Any]],
                priority: Sequence[str]) -> list[Clause]:
    """Every clause that all passing examples satisfy, plainest kind first, then by priority."""
    rank = {name: i for i, name in enumerate(priority)}
    names = sorted({n for f in passing for n in f}, key=lambda n: (rank.get(n, len(rank)), n))
    by_kind: dict[str, list[Clause]] = {kind: [] for kind in KINDS}
    for name in names:
        if name.startswith(PARTIES):
            for kind in (CONSISTENT, UNEQUAL):
                clause = Clause(name, None, kind)
                if all(clause.holds(f) for f in passing):
                    by_kind[kind].append(clause)
            continue
        values = [f.get(name, _MISSING) for f in passing]
        if any(v is _MISSING or not _hashable(v) for v in values):
            continue
        seen = set(values)
        if len(seen) == 1:
            by_kind[CONSTANT].append(Clause(name, values[0]))
            continue
        if None not in seen:
            by_kind[EXIST].append(Clause(name, None, EXIST))
        if len(seen) <= MAX_ONE_OF:
            by_kind[ONE_OF].append(Clause(name, tuple(sorted(seen, key=repr)), ONE_OF))
        excluded = {f.get(name, _MISSING) for f in failing} - seen - {_MISSING}
        by_kind[NOT] += [Clause(name, v, NOT) for v in sorted(excluded, key=repr) if _hashable(v)]
    return [clause for kind in KINDS for clause in by_kind[kind]]


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
    candidates = _candidates(passing, failing, priority)
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
    return ordered(chosen)


def scoped(precondition: Sequence[Clause], passing: Sequence[dict[str, Any]], fields: Sequence[str]) -> list[Clause]:
    """``precondition`` plus ``field = value`` for each of ``fields`` that every passing example
    shares: nothing was learned about the other values (a second backward in one step, a
    backward inside DDP's ``no_sync``), so the invariant does not judge them."""
    extra = []
    for name in fields:
        values = {f.get(name, _MISSING) for f in passing}
        if len(values) == 1 and _MISSING not in values and not any(c.field == name for c in precondition):
            extra.append(Clause(name, values.pop()))
    return ordered([*precondition, *extra])
