"""Judging examples inside an invariant's domain, and counting those outside it.

An invariant speaks only of the contexts its references showed (``Invariant.domain``: for each
context feature of its relation, the values seen), and only of programs that have what it names
(a relation's optional ``outside(invariant, example)`` says why an example is not the
invariant's business: a class the program never uses, a program that never trains). An example
outside is *not covered*: it is counted per invariant, with the reason, and never reported as a
violation. Online checks, offline checks and the cross-rank checks judge
through ``violations_of``, so they agree on what is covered.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any

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
        worst = sorted(self.outside.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        reasons = []
        for inv_id, _ in worst:
            inv = (invariants or {}).get(inv_id)
            about = _subject_name(inv) if inv is not None else inv_id
            reasons.append(f"{self.reasons.get(inv_id, '?')} for {about}")
        more = ", ..." if len(self.outside) > limit else ""
        return (f"{checked} of {checked + outside} examples checked, {outside} outside the references' domain "
                f"({'; '.join(reasons)}{more})")


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
    verdicts = None
    if coverage is not None:
        checked = coverage.checked
        key = getattr(example, "features", None)
        if key is not None:
            verdicts = coverage.memo.get(key)
            if verdicts is None:
                if len(coverage.memo) >= MEMO_LIMIT:
                    coverage.memo.clear()
                    coverage.admitted.clear()
                verdicts = coverage.memo[key] = {}
    for inv in invariants:
        inv_id = inv.id
        reason = None
        if verdicts is not None and inv_id in verdicts:
            reason = verdicts[inv_id]
        else:
            domain = inv.domain_sets
            if domain:
                if features is None:
                    features = _features_of(example)
                found = outside_domain(domain, features)
                reason = _reason(found) if found is not None else None
            if verdicts is not None:
                verdicts[inv_id] = reason
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
