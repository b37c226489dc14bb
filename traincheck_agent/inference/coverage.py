"""Judging examples inside an invariant's domain, and counting those outside it.

An invariant speaks only of the contexts its references showed (``Invariant.domain``: for each
context feature of its relation, the values seen), and only of programs that have what it names
(a relation's optional ``outside(invariant, example)`` says why an example is not the
invariant's business: a class the program never uses, a program that never trains). An example
outside is *not covered*: it is counted per invariant, with the reason, and never reported as a
violation. Online checks, offline checks and the cross-rank checks judge
through ``violations_of`` (the online checker a snapshot's examples at once, through
``violations_in``), so they agree on what is covered.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any, NamedTuple

from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.judged_counts import JudgedCounts, example_key
from traincheck_agent.inference.preconditions import holds_all, outside_domain

MAX_REASON_CHARS = 120


class Coverage:
    """Per invariant id: examples judged, and examples outside the domain with one reason."""

    def __init__(self) -> None:
        self.checked: dict[str, int] = {}
        self.outside: dict[str, int] = {}
        self.reasons: dict[str, str] = {}
        # An example's features -> each invariant's domain verdict on them (see ``violations_of``).
        self.memo: dict[Any, dict[str, str | None]] = {}
        # Per invariant, trace and step where it broke: the examples it judged there, with its
        # precondition holding (the "of M" of "N of M parameters").
        self.judged = JudgedCounts()
        self.admitted: dict[Any, dict[str, bool]] = {}  # features -> precondition verdict per invariant

    def merge(self, other: dict[str, Any]) -> None:
        """Add counts in the form ``to_json`` gives (from a checker in another process)."""
        for key, target in (("checked", self.checked), ("outside", self.outside)):
            for inv_id, count in (other.get(key) or {}).items():
                if isinstance(count, int):
                    target[str(inv_id)] = target.get(str(inv_id), 0) + count
        for inv_id, reason in (other.get("reasons") or {}).items():
            self.reasons.setdefault(str(inv_id), str(reason)[:MAX_REASON_CHARS])
        self.judged.merge(other.get("judged"))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"checked": dict(sorted(self.checked.items())), "outside": dict(sorted(self.outside.items())),
               "reasons": dict(sorted(self.reasons.items()))}
        judged = self.judged.to_json()
        if judged:
            out["judged"] = judged
        return out

    def totals(self) -> tuple[int, int]:
        """(examples judged, examples outside the domains), over every invariant."""
        return sum(self.checked.values()), sum(self.outside.values())

    def summary(self, invariants: dict[str, Invariant] | None = None, limit: int = 2) -> str:
        """``412 of 530 examples checked, 118 outside the references' domain (autocast=... never
        seen for Conv2d.forward, ...)``, or "" when nothing was outside."""
        checked, outside = self.totals()
        if not outside:
            return ""
        reasons: list[str] = []  # most examples first, each wording once (invariants of one call share it)
        for inv_id, _ in sorted(self.outside.items(), key=lambda kv: (-kv[1], kv[0])):
            inv = (invariants or {}).get(inv_id)
            about = _subject_name(inv) if inv is not None else inv_id
            reason = f"{self.reasons.get(inv_id, '?')} for {about}"
            if reason not in reasons:
                reasons.append(reason)
        more = ", ..." if len(reasons) > limit else ""
        return (f"{checked} of {checked + outside} examples checked, {outside} outside the references' domain "
                f"({'; '.join(reasons[:limit])}{more})")


def _subject_name(inv: Invariant) -> str:
    subject = inv.subject
    return str(subject.get("api") or subject.get("event") or inv.relation)


def _reason(found: tuple[str, Any]) -> str:
    name, value = found
    return f"{name}={value} never seen"[:MAX_REASON_CHARS]


def _features_of(example: Any) -> dict[str, Any]:
    """An example's features; {} for relations whose examples have none (call order)."""
    feature_map = getattr(example, "feature_map", None)
    return feature_map() if feature_map is not None else {}


MEMO_LIMIT = 4096  # distinct feature tuples whose domain verdicts a Coverage remembers


def violations_of(relation: ModuleType, invariants: Iterable[Invariant], example: Any,
                  coverage: Coverage | None) -> Iterator[Invariant]:
    """The invariants (of ``example``'s group) it violates, judging it only inside each one's
    domain; outside examples that the precondition admits are counted in ``coverage``.

    The domain verdicts of an example depend on its features alone, and most examples of a run
    repeat a few feature tuples (the same parameters, step after step): ``coverage`` remembers
    them per tuple, so the common case costs one lookup per invariant."""
    features = None
    applies = getattr(relation, "outside", None)
    verdicts: dict[str, str | None] = {}  # not remembered: an example without a feature tuple
    if coverage is not None:
        checked = coverage.checked
        key = getattr(example, "features", None)
        if key is not None:
            verdicts = _domain_verdicts(coverage, key)
    for inv in invariants:
        inv_id = inv.id
        reason = _domain_reason(inv, verdicts, example)
        if reason is None and applies is not None:
            reason = applies(inv, example)
        if reason is not None:
            if coverage is not None:
                if features is None:
                    features = _features_of(example)
                if holds_all(inv.precondition, features):
                    coverage.outside[inv_id] = coverage.outside.get(inv_id, 0) + 1
                    coverage.reasons.setdefault(inv_id, reason[:MAX_REASON_CHARS])
            continue
        count_key = None
        if coverage is not None:
            checked[inv_id] = checked.get(inv_id, 0) + 1
            count_key = example_key(inv_id, example)
            if count_key is not None and _admitted(coverage, inv, example):
                coverage.judged.judged(count_key)
        if relation.violates(inv, example):
            if count_key is not None and coverage is not None:
                coverage.judged.violated(count_key)
            yield inv


def violations_in(relation: ModuleType, by_key: Mapping[Hashable, Sequence[Invariant]], examples: Sequence[Any],
                  coverage: Coverage) -> Iterator[tuple[Invariant, Any]]:
    """``violations_of`` over a batch of examples (a snapshot's), each against the invariants of
    its group in ``by_key``: the same verdicts in the same order, and the same counts.

    What depends on an example's group and features alone (each invariant's domain verdict
    and whether its precondition admits the example) is worked out once per pair in the batch.
    A relation whose verdicts depend on nothing else of an example but its ``outcome`` (a
    hashable summary: a transition's value classes, whether a grad was applied) has each
    invariant's verdict worked out once per (group, features, outcome): a snapshot of a
    thousand parameters that all did the same costs one verdict per invariant. The counts are
    added once per batch. Examples without a feature tuple take ``violations_of``."""
    applies = getattr(relation, "outside", None)
    outcome_of = getattr(relation, "outcome", None)
    key_of, violates = relation.key_of, relation.violates
    plans: dict[tuple[Hashable, Any], list[tuple[Invariant, str | None, bool]]] = {}
    verdicts: dict[Hashable, _Verdicts] = {}
    tally: dict[Hashable, list[Any]] = {}  # (verdicts' key, trace, step) -> [verdicts, trace and step, examples]
    found: list[tuple[Invariant, Any, tuple[str, str, int] | None]] = []
    for index, example in enumerate(examples):
        group = key_of(example)
        invariants = by_key.get(group)
        if not invariants:
            continue
        features = getattr(example, "features", None)
        if features is None:
            found += ((inv, example, None) for inv in violations_of(relation, invariants, example, coverage))
            continue
        plan = plans.get((group, features))
        if plan is None:
            domain = _domain_verdicts(coverage, features)
            plan = plans[(group, features)] = [
                (inv, _domain_reason(inv, domain, example), _admitted(coverage, inv, example)) for inv in invariants]
        step = getattr(example, "step", None)
        where: tuple[str, int] | None = None  # the count it belongs to, as ``example_key``'s
        if getattr(example, "var", None) is not None and isinstance(step, int) and not isinstance(step, bool):
            where = (str(getattr(example, "trace", "")), step)
        key: Hashable = (group, features, outcome_of(example)) if outcome_of is not None else index
        judged = verdicts.get(key)
        if judged is None:
            judged = verdicts[key] = _judge_plan(plan, example, applies, violates)
        counted = tally.get((key, where))
        if counted is None:
            tally[(key, where)] = [judged, where, 1]
        else:
            counted[2] += 1
        for inv in judged.violated:
            found.append((inv, example, None if where is None else (inv.id, where[0], where[1])))
    outside: dict[str, str] = {}
    for verdict, where, n in tally.values():
        for inv_id, reason, admitted in verdict.counted:
            if reason is not None:
                if admitted:
                    coverage.outside[inv_id] = coverage.outside.get(inv_id, 0) + n
                    outside.setdefault(inv_id, reason)
                continue
            coverage.checked[inv_id] = coverage.checked.get(inv_id, 0) + n
            if where is not None and admitted:
                coverage.judged.judged((inv_id, where[0], where[1]), n)
    for inv_id, reason in outside.items():
        coverage.reasons.setdefault(inv_id, reason[:MAX_REASON_CHARS])
    for inv, example, count_key in found:
        if count_key is not None:
            coverage.judged.violated(count_key)
        yield inv, example


class _Verdicts(NamedTuple):
    """One example's verdicts under each invariant of its group: (id, why it is outside the
    invariant's domain or None, whether the precondition admits it), and those it violates."""

    counted: list[tuple[str, str | None, bool]]
    violated: list[Invariant]


def _judge_plan(plan: list[tuple[Invariant, str | None, bool]], example: Any, applies: Any, violates: Any) -> _Verdicts:
    counted, violated = [], []
    for inv, reason, admitted in plan:
        if reason is None and applies is not None:
            reason = applies(inv, example)
        counted.append((inv.id, reason, admitted))
        if reason is None and violates(inv, example):
            violated.append(inv)
    return _Verdicts(counted, violated)


def _domain_verdicts(coverage: Coverage, features: Hashable) -> dict[str, str | None]:
    """The remembered domain verdicts of a feature tuple, per invariant id."""
    verdicts = coverage.memo.get(features)
    if verdicts is None:
        if len(coverage.memo) >= MEMO_LIMIT:
            coverage.memo.clear()
            coverage.admitted.clear()
        verdicts = coverage.memo[features] = {}
    return verdicts


def _domain_reason(inv: Invariant, verdicts: dict[str, str | None], example: Any) -> str | None:
    """Why ``example`` lies outside ``inv``'s domain, or None (remembered in ``verdicts``)."""
    if inv.id in verdicts:
        return verdicts[inv.id]
    reason = None
    domain = inv.domain_sets
    if domain:
        found = outside_domain(domain, _features_of(example))
        reason = _reason(found) if found is not None else None
    verdicts[inv.id] = reason
    return reason


def _admitted(coverage: Coverage, inv: Invariant, example: Any) -> bool:
    """Whether ``inv``'s precondition holds for ``example`` (remembered per feature tuple)."""
    if not inv.precondition:
        return True
    key = getattr(example, "features", None)
    if key is None:
        return holds_all(inv.precondition, _features_of(example))
    verdicts = coverage.admitted.setdefault(key, {})
    verdict = verdicts.get(inv.id)
    if verdict is None:
        verdict = verdicts[inv.id] = holds_all(inv.precondition, _features_of(example))
    return verdict
