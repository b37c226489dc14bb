"""Triage: group violation records and rank the groups, likely root cause first.

One fault usually breaks several invariants, on many parameters and over many steps. Records
are grouped by

- invariant family: the relation and the API / event the invariant is about
  (``StateTransition`` of ``optimizer.step``);
- variable pattern: numbers generalised and the leaf names merged, so that
  ``model.layers.3.weight`` and ``model.layers.7.bias`` both fall under
  ``model.layers.*.{bias,weight}``;
- step window: a gap of more than ``STEP_WINDOW`` steps (and more than three times the usual
  gap, so that sampled snapshots every N steps do not split) starts a new group.

Groups are ranked by the step where they first broke (the earliest is nearest the cause); at the
same step, invariants about the context a computation ran in (a module outside its autocast
region, a step taken in eval mode) come first, then invariants about state (what a step did to
the parameters), then those about call order or arguments, since a state invariant names the
tensors that went wrong while an ordering invariant often only shows the symptom (each relation
module says which kind it is, ``TRIAGE_KIND``); then the invariant with the most support in the
clean runs; then, for the same relation and call, what was seen before the call ahead of what
was seen after it. The order is deterministic.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from traincheck_agent.inference import relations

if TYPE_CHECKING:
    from traincheck_agent.inference.invariant import Invariant

STEP_WINDOW = 50
_DIGITS = re.compile(r"\d+")


@dataclass
class Group:
    """Violations that most likely share one cause."""

    key: str
    relation: str
    subject: str
    pattern: str
    first_step: int | None
    last_step: int | None
    count: int
    ranks: list[int]
    variables: list[str]
    apis: list[str]
    invariants: list[str]
    expected: str
    support: int
    kind: str
    example: dict[str, Any]
    rank_reason: str = ""
    steps: list[int] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The group without its records (the example is kept)."""
        return {
            "key": self.key, "relation": self.relation, "subject": self.subject,
            "pattern": self.pattern, "first_step": self.first_step, "last_step": self.last_step,
            "count": self.count, "ranks": self.ranks, "variables": self.variables,
            "apis": self.apis, "invariants": self.invariants, "expected": self.expected,
            "support": self.support, "kind": self.kind, "rank_reason": self.rank_reason,
            "steps": self.steps, "example": self.example,
        }


def variable_pattern(name: str) -> str:
    """``model.layers.3.weight`` -> ``model.layers.*.weight``."""
    return _DIGITS.sub("*", name)


def _prefix(pattern: str) -> str:
    return pattern.rsplit(".", 1)[0] if "." in pattern else pattern


def describe_patterns(variables: list[str]) -> str:
    """One pattern for a set of variable names: ``model.backbone.*.{bias,weight}``."""
    patterns = sorted({variable_pattern(v) for v in variables if v})
    if len(patterns) <= 1:
        return patterns[0] if patterns else ""
    prefixes = {_prefix(p) for p in patterns}
    if len(prefixes) == 1 and all("." in p for p in patterns):
        leaves = sorted(p.rsplit(".", 1)[1] for p in patterns)
        return f"{prefixes.pop()}.{{{','.join(leaves)}}}"
    return ", ".join(patterns)


def relation_kind(relation: str) -> str:
    """The relation's triage kind (``TRIAGE_KIND`` of its module): context, state or ordering;
    "other" for a name that is not a relation."""
    found = relations.module(relation)
    return found.TRIAGE_KIND if found is not None else "other"


_KIND_ORDER = {kind: position for position, kind in enumerate(relations.TRIAGE_KINDS)}


def _about(record: dict[str, Any], invariant: Invariant | None, field: str) -> Any:
    """A field of the invariant (``subject``, ``support``, ``description``), or, when the
    invariants file is not at hand, the copy the record's evidence carries."""
    if invariant is not None:
        return getattr(invariant, field)
    evidence = record.get("evidence")
    key = "expected" if field == "description" else field
    return evidence.get(key) if isinstance(evidence, dict) else None


def _subject_of(record: dict[str, Any], invariant: Invariant | None) -> str:
    # A relation may give all its violations one subject whatever API they name
    # (``SHARED_SUBJECT``): one region of code (an autocast block) holds modules of several
    # classes, and one fault moves all of them.
    found = relations.module(str(record.get("relation") or (invariant.relation if invariant else "")))
    shared = getattr(found, "SHARED_SUBJECT", None)
    if shared is not None:
        return shared
    subject = _about(record, invariant, "subject")
    if isinstance(subject, dict):
        for key in ("event", "api"):
            if subject.get(key):
                return str(subject[key])
    return str(record.get("api") or "")


def _support_of(record: dict[str, Any], invariant: Invariant | None) -> int:
    support = _about(record, invariant, "support")
    if isinstance(support, dict):
        passing = support.get("passing", 0)
        if isinstance(passing, int) and not isinstance(passing, bool):
            return passing
    return 0


def _expected_of(record: dict[str, Any], invariant: Invariant | None) -> str:
    expected = _about(record, invariant, "description")
    if not expected and invariant is not None:  # an invariant without a description
        expected = _about(record, None, "description")
    return str(expected or "")


def _step(record: dict[str, Any]) -> int | None:
    step = record.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _ranks_of(record: dict[str, Any]) -> list[int]:
    ranks = [r for r in record.get("ranks") or [] if isinstance(r, int)]
    rank = record.get("rank")
    if isinstance(rank, int) and not ranks:
        ranks = [rank]
    return ranks


def _order(record: dict[str, Any]) -> tuple:
    step = _step(record)
    return (step is None, step if step is not None else 0, str(record.get("rank")),
            str(record.get("invariant", "")), str(record.get("variable", "")),
            str(record.get("api", "")), str(record.get("message", "")))


def _dedupe(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same violation reported twice (by two ranks of a cross-rank check, or written twice)
    counts once."""
    seen: set[tuple] = set()
    out = []
    for record in sorted(records, key=_order):
        where = tuple(record["ranks"]) if record.get("ranks") else record.get("rank")
        key = (record.get("invariant"), _step(record), str(where), record.get("variable"),
               record.get("api"), record.get("message"))
        if key not in seen:
            seen.add(key)
            out.append(record)
    return out


def _windows(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Split records (sorted by step) where the step gap is unusually large."""
    steps = sorted({s for s in (_step(r) for r in records) if s is not None})
    gaps = [b - a for a, b in zip(steps, steps[1:], strict=False)]
    limit = max(STEP_WINDOW, 3 * statistics.median(gaps)) if gaps else STEP_WINDOW
    windows: list[list[dict[str, Any]]] = []
    previous: int | None = None
    for record in records:
        step = _step(record)
        if not windows or (step is not None and previous is not None and step - previous > limit):
            windows.append([])
        windows[-1].append(record)
        if step is not None:
            previous = step
    return windows


def triage(records: list[dict[str, Any]],
           invariants: dict[str, Invariant] | None = None) -> list[Group]:
    """Group ``records`` (violation records, any ranks, any order) and rank the groups, the
    likely root cause first. ``invariants`` (by id) adds what the records do not carry."""
    invariants = invariants or {}
    buckets: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for record in _dedupe(records):
        inv = invariants.get(str(record.get("invariant", "")))
        relation = str(record.get("relation") or (inv.relation if inv else ""))
        family = (relation, _subject_of(record, inv))
        pattern = _prefix(variable_pattern(str(record.get("variable") or "")))
        buckets.setdefault((*family, pattern), []).append(record)

    groups = []
    for (relation, subject, _), bucket in buckets.items():
        for window in _windows(bucket):
            groups.append(_group(relation, subject, window, invariants))
    groups.sort(key=_rank_key)
    earliest = min((g.first_step for g in groups if g.first_step is not None), default=None)
    for position, group in enumerate(groups):
        group.rank_reason = _reason(group, position, earliest)
    return groups


def _group(relation: str, subject: str, records: list[dict[str, Any]],
           invariants: dict[str, Invariant]) -> Group:
    steps = sorted({s for s in (_step(r) for r in records) if s is not None})
    ids = sorted({str(r.get("invariant", "")) for r in records})
    variables = sorted({str(r["variable"]) for r in records if r.get("variable")})
    apis = sorted({str(r["api"]) for r in records if r.get("api")})
    ranks = sorted({rank for r in records for rank in _ranks_of(r)})
    support = max(_support_of(r, invariants.get(str(r.get("invariant", "")))) for r in records)
    expected = sorted({e for r in records
                       if (e := _expected_of(r, invariants.get(str(r.get("invariant", "")))))})
    pattern = describe_patterns(variables)
    first = steps[0] if steps else None
    key = f"{relation}|{subject}|{pattern}|{'' if first is None else first}"
    return Group(key=key, relation=relation, subject=subject, pattern=pattern, first_step=first,
                 last_step=steps[-1] if steps else None, count=len(records), ranks=ranks,
                 variables=variables, apis=apis, invariants=ids, expected="; ".join(expected),
                 support=support, kind=relation_kind(relation), example=records[0], steps=steps,
                 records=records)


def _rank_key(group: Group) -> tuple:
    first = group.first_step
    return (first is None, first if first is not None else 0, _KIND_ORDER[group.kind],
            -group.support, group.relation, _moment(group.subject), group.pattern, group.key)


def _moment(subject: str) -> tuple[str, int, str]:
    """Sorts a snapshot point ``before:<event>`` ahead of ``after:<event>``: of two equally
    supported groups broken at the same step, the state seen before a call went wrong first (grads
    that differ across ranks before ``optimizer.step`` come before the data that differs after)."""
    when, _, event = subject.partition(":")
    if event and when in ("before", "after"):
        return event, 0 if when == "before" else 1, subject
    return subject, 0, subject


def _reason(group: Group, position: int, earliest: int | None) -> str:
    if group.first_step is None:
        when = "no step recorded"
    elif group.first_step == earliest:
        when = f"first violated at step {group.first_step}, the earliest step with a violation"
    else:
        when = f"first violated at step {group.first_step}"
    kind = {"context": "a context invariant (the mode or precision a computation ran in)",
            "state": "a state invariant (what the step did to the tensors)",
            "ordering": "an ordering / argument invariant",
            "other": "an invariant of another kind"}[group.kind]
    ranked = "ranked first: " if position == 0 else ""
    return f"{ranked}{when}; {kind}; support {group.support} passing examples in the clean runs"


__all__ = ["STEP_WINDOW", "Group", "describe_patterns",
           "relation_kind", "triage", "variable_pattern"]
