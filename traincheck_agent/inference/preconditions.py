"""Preconditions: the condition under which a hypothesis holds, deduced from its examples.

An example is described by features known before the event (the variable's dtype and
requires_grad, the class of its grad before the call, the phase, framework markings ...).
A clause is a candidate when every passing example satisfies it: ``CONSTANT`` (they all have
one value), ``EXIST`` (none lacks the field), ``ABSENT`` (none has it: a DDP parameter carries
no ``partition_dim``), ``ONE_OF`` (a disjunction of the few values they have) and ``NOT`` (a
value only failing examples have: "except in eval"; an example without the field satisfies
it). The precondition is the smallest set of candidates (greedy cover, the plainest kind winning
ties) that every failing example breaks. Only when no conjunction of such clauses separates the
examples are two-clause disjunctions (``ANY``: "tensor_model_parallel is not set or = False")
tried; when some failing example still satisfies every candidate, the examples cannot be
separated and the hypothesis is dropped. Identity-like fields (ids, times, pids, names) are
never features, so they can never become clauses.

Merging references is monotone (``deduce_scopes``): when the examples of all references
cannot be separated, each reference's own passing examples are separated from every failing
example on their own, so an invariant that one pipeline supports keeps a precondition scoped to
that pipeline's contexts, unless another reference breaks it in a context no clause tells apart.

Each invariant also records its *domain* (``domain_of``): for the context features its relation
names, the values its passing examples showed. A checker judges an example only inside it;
outside, the example is "not covered" (counted, never a violation).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any, NamedTuple

_MISSING = object()
MAX_CLAUSES = 3


class FeatureExample:
    """Base of every relation's example: ``features`` (name, value) pairs known before the
    event, on which preconditions are deduced and evaluated."""

    features: tuple[tuple[str, Any], ...]

    def feature_map(self) -> dict[str, Any]:
        return dict(self.features)


CONSTANT, EXIST, ABSENT, NOT, ONE_OF = "CONSTANT", "EXIST", "ABSENT", "NOT", "ONE_OF"
CONSISTENT, UNEQUAL = "CONSISTENT", "UNEQUAL"
ANY = "ANY"  # a disjunction of two clauses
# Also the tie-break order: the plainest clause first.
KINDS = (CONSTANT, EXIST, ABSENT, CONSISTENT, UNEQUAL, NOT, ONE_OF, ANY)
# Features of examples made of several parties (ranks) hold one value per party, as a tuple,
# under a name with this prefix; only CONSISTENT and UNEQUAL clauses are made from them.
PARTIES = "parties."
MAX_ONE_OF = 3  # a disjunction of more values than this explains nothing


class Clause(NamedTuple):
    """One condition on an example's features.

    ``CONSTANT``: ``field`` equals ``value``. ``EXIST``: ``field`` is present and not None (e.g.
    inside some autocast context). ``ABSENT``: ``field`` is missing or None. ``NOT``: ``field``
    is anything but ``value`` (``except in eval``), missing included. ``ONE_OF``: ``field`` is
    one of the values in the tuple ``value`` (a disjunction). On a per-party field
    (``parties.<name>``, one value per rank): ``CONSISTENT``, every party has the same value;
    ``UNEQUAL``, no two parties share a value (``value`` is None for both). ``ANY``: ``value``
    is a pair of clauses, one of which holds (``field`` is "").
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
        if self.kind == ABSENT:
            return got is _MISSING or got is None
        if self.kind == ANY:
            return any(c.holds(features) for c in self.value)
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
        value = self.value
        if self.kind == ONE_OF:
            value = list(value)
        elif self.kind == ANY:
            value = [c.to_json() for c in value]
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
        elif kind == ANY:
            if not isinstance(value, list) or len(value) != 2 or not all(isinstance(c, dict) for c in value):
                raise ValueError("an ANY clause needs a list of two clauses")
            value = tuple(cls.from_json(c) for c in value)
            if any(c.kind == ANY for c in value):
                raise ValueError("an ANY clause cannot hold another ANY clause")
        return cls(field=raw["field"], value=value, kind=kind)

    def text(self) -> str:
        if self.kind == EXIST:
            return f"{self.field} is set"
        if self.kind == ABSENT:
            return f"{self.field} is not set"
        if self.kind == ANY:
            return f"({self.value[0].text()} or {self.value[1].text()})"
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
    names = sorted({n for f in (*passing, *failing) for n in f}, key=lambda n: (rank.get(n, len(rank)), n))
    by_kind: dict[str, list[Clause]] = {kind: [] for kind in KINDS}
    for name in names:
        if name.startswith(PARTIES):
            for kind in (CONSISTENT, UNEQUAL):
                clause = Clause(name, None, kind)
                if all(clause.holds(f) for f in passing):
                    by_kind[kind].append(clause)
            continue
        values = [f.get(name, _MISSING) for f in passing]
        if not all(v is _MISSING or _hashable(v) for v in values):
            continue
        seen = set(values)
        lacking = _MISSING in seen or None in seen
        if seen <= {_MISSING, None} and _MISSING in seen:
            by_kind[ABSENT].append(Clause(name, None, ABSENT))
            continue
        if len(seen) == 1:
            by_kind[CONSTANT].append(Clause(name, values[0]))
            continue
        if not lacking:
            by_kind[EXIST].append(Clause(name, None, EXIST))
        if _MISSING not in seen and len(seen) <= MAX_ONE_OF:
            by_kind[ONE_OF].append(Clause(name, tuple(sorted(seen, key=repr)), ONE_OF))
        excluded = {f.get(name, _MISSING) for f in failing} - seen - {_MISSING}
        by_kind[NOT] += [Clause(name, v, NOT) for v in sorted(excluded, key=repr) if _hashable(v)]
    return [clause for kind in KINDS for clause in by_kind[kind]]


def _parts(passing: Sequence[dict[str, Any]]) -> list[Clause]:
    """Clauses that hold for some passing examples only: the halves of a disjunction. Per field,
    each value it takes (a few at most) and, where some examples lack it, its absence."""
    out: list[Clause] = []
    names = sorted({n for f in passing for n in f if not n.startswith(PARTIES)})
    for name in names:
        values = {f.get(name, _MISSING) for f in passing}
        if not all(v is _MISSING or _hashable(v) for v in values) or len(values) < 2:
            continue
        present = values - {_MISSING, None}
        if len(present) > MAX_ONE_OF:
            continue
        out += [Clause(name, v) for v in sorted(present, key=repr)]
        if len(present) < len(values):
            out.append(Clause(name, None, ABSENT))
    return out


def _mask(clause: Clause, examples: Sequence[dict[str, Any]]) -> int:
    """The examples a clause holds for, as the bits of an int."""
    bits = 0
    for i, f in enumerate(examples):
        if clause.holds(f):
            bits |= 1 << i
    return bits


def _disjunctions(passing: Sequence[dict[str, Any]], failing: Sequence[dict[str, Any]]) -> list[Clause]:
    """Every ``a or b`` of two partial clauses that all passing examples satisfy and that some
    failing example breaks, most failing examples broken first."""
    parts = _parts(passing)
    every = (1 << len(passing)) - 1
    masks = [(c, _mask(c, passing), _mask(c, failing)) for c in parts]
    found: list[tuple[int, Clause]] = []
    for i, (a, pa, fa) in enumerate(masks):
        for b, pb, fb in masks[i + 1:]:
            if (pa | pb) != every or (a.field == b.field and ABSENT not in (a.kind, b.kind)):
                continue  # two values of one field are a ONE_OF, already tried
            kept = bin(fa | fb).count("1")
            if kept < len(failing):
                found.append((kept, Clause("", (a, b), ANY)))
    return [c for _, c in sorted(found, key=lambda kc: (kc[0], kc[1].sort_key()))]


def _cover(candidates: list[Clause], failing: Sequence[dict[str, Any]]) -> list[Clause] | None:
    """The greedy cover: clauses (at most ``MAX_CLAUSES``) that together break every failing
    example, each chosen for breaking the most of those left, the earliest candidate on ties."""
    left = (1 << len(failing)) - 1
    breaks = [(c, ~_mask(c, failing)) for c in candidates]
    chosen: list[Clause] = []
    while left:
        best, best_killed = None, 0
        for clause, broken in breaks:
            killed = bin(broken & left).count("1")
            if killed > best_killed:
                best, best_killed, best_bits = clause, killed, broken
        if best is None or len(chosen) == MAX_CLAUSES:
            return None
        chosen.append(best)
        left &= ~best_bits
    return ordered(chosen)


def deduce(passing: Sequence[dict[str, Any]], failing: Sequence[dict[str, Any]],
           priority: Sequence[str] = ()) -> list[Clause] | None:
    """The precondition separating ``passing`` from ``failing``; [] when nothing fails;
    None when no conjunction of at most ``MAX_CLAUSES`` candidate clauses separates them, two-
    clause disjunctions included. Among clauses that exclude equally many failing examples,
    fields named in ``priority`` win, in that order."""
    if not passing:
        return None
    if not failing:
        return []
    candidates = _candidates(passing, failing, priority)
    found = _cover(candidates, failing)
    if found is None:
        found = _cover(candidates + _disjunctions(passing, failing), failing)
    return found


class Scope(NamedTuple):
    """A precondition and the passing examples (indices) it keeps."""

    precondition: list[Clause]
    passing: list[int]


def deduce_scopes(passing: Sequence[dict[str, Any]], failing: Sequence[dict[str, Any]],
                  sources: Sequence[Hashable], priority: Sequence[str] = ()) -> list[Scope]:
    """The preconditions under which a hypothesis holds, merging references monotonically.

    One precondition for all of ``passing`` when one separates them from ``failing``. Otherwise
    each source's (reference trace's) passing examples are separated from every failing
    example on their own: what one reference supports stays, scoped to its contexts, unless a
    failing example of another reference cannot be told apart from it. Sources that reach the
    same precondition share one scope; a scope keeps every passing example its precondition
    holds for. ``sources[i]`` is the source of ``passing[i]``."""
    pooled = deduce(passing, failing, priority)
    if pooled is not None:
        return [Scope(pooled, list(range(len(passing))))]
    by_source: dict[Hashable, list[int]] = {}
    for i, source in enumerate(sources):
        by_source.setdefault(source, []).append(i)
    if len(by_source) < 2:
        return []
    scopes: dict[tuple[Clause, ...], Scope] = {}
    for source in sorted(by_source, key=repr):
        clauses = deduce([passing[i] for i in by_source[source]], failing, priority)
        if clauses is None or tuple(clauses) in scopes:
            continue
        scopes[tuple(clauses)] = Scope(clauses, [i for i, f in enumerate(passing) if holds_all(clauses, f)])
    return list(scopes.values())


def enough_support(steps: Sequence[int], min_passing: int, min_steps: int) -> bool:
    """Whether passing examples at ``steps`` (one entry per example) are enough to keep a
    hypothesis: at least ``min_passing`` of them, over at least ``min_steps`` distinct steps."""
    return len(steps) >= min_passing and len(set(steps)) >= min_steps


Domain = tuple[tuple[str, frozenset[Any]], ...]


def domain_of(passing: Iterable[dict[str, Any]], fields: Sequence[str]) -> dict[str, list[Any]]:
    """For each of ``fields``, the values the passing examples showed (None for an example
    without the field); fields whose values cannot be compared are left out."""
    seen: dict[str, set[Any]] = {name: set() for name in fields}
    for features in passing:
        for name, values in seen.items():
            if values is not None:
                value = features.get(name)
                if _hashable(value) and not isinstance(value, (tuple, list)):
                    values.add(value)
                else:
                    seen[name] = None  # type: ignore[assignment]
    return {name: sorted(values, key=repr) for name, values in seen.items() if values}


def outside_domain(domain: Domain, features: dict[str, Any]) -> tuple[str, Any] | None:
    """The first (field, value) of ``features`` that the domain never saw; None inside it."""
    for name, allowed in domain:
        value = features.get(name)
        if value not in allowed:
            return name, value
    return None


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
