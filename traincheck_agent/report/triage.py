"""Triage: group violation records and rank the groups, likely root cause first.

One fault usually breaks several invariants, on many parameters and over many steps, and should
read as one group. Records are grouped by

- invariant family: the relation and the API / event the invariant is about
  (``StateTransition`` of ``backward``), whatever variables it names: a forgotten ``zero_grad``
  that leaves stale grads on 40 parameters is one group, not one per layer type;
- step window: a gap of more than ``STEP_WINDOW`` steps (and more than three times the usual
  gap, so that sampled snapshots every N steps do not split) starts a new group.

Inside a group, the variables are summarised as name patterns with counts
(``model.conv*.{bias,weight}`` x4, ``model.bn1.{bias,weight}`` x2: ``name_patterns``), and the
group reads as one sentence ("backward found grads left over from an earlier step on 10 of 10
parameters of `model` at steps 1-4") with a hint at the usual cause where one is known
(``hints``).

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

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from traincheck_agent.inference import relations
from traincheck_agent.report.hints import api_of, find_hint, what_of
from traincheck_agent.report.name_patterns import describe_patterns, name_patterns, variable_pattern
from traincheck_agent.report.sentences import group_sentence, plain_expected

if TYPE_CHECKING:
    from traincheck_agent.inference.invariant import Invariant

STEP_WINDOW = 50


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
    # The variables as name patterns, each with how many names it stands for, most first.
    patterns: list[tuple[str, int]] = field(default_factory=list)
    # How many variables the main invariant judged at the first step, when known (``N of M``).
    of_total: int | None = None
    sentence: str = ""
    hint: str = ""
    cause: str = ""  # the hint's short name of the usual cause ("" without a hint)
    # The number (1-based rank) of an earlier group of the same usual cause whose steps overlap
    # this one's: most likely the same fault, seen by another invariant.
    same_cause_as: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The group without its records (the example is kept)."""
        return {
            "key": self.key, "relation": self.relation, "subject": self.subject,
            "pattern": self.pattern, "first_step": self.first_step, "last_step": self.last_step,
            "count": self.count, "ranks": self.ranks, "variables": self.variables,
            "apis": self.apis, "invariants": self.invariants, "expected": self.expected,
            "support": self.support, "kind": self.kind, "rank_reason": self.rank_reason,
            "steps": self.steps, "example": self.example,
            "patterns": [{"pattern": p, "count": n} for p, n in self.patterns],
            "of_total": self.of_total, "sentence": self.sentence, "hint": self.hint,
            "cause": self.cause, "same_cause_as": self.same_cause_as,
        }


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


def distinct_violations(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


# (trace, invariant id, step) -> the examples the invariant judged there (``judged_counts``).
Judged = dict[tuple[str, str, int], int]


def _trace_key(trace: Any, rank: Any) -> str:
    """A trace's name; an online check names every rank's trace "online", so the rank is added."""
    return f"{trace}@rank{rank}" if trace == "online" else str(trace)


def judged_counts(stats: list[dict[str, Any]]) -> Judged:
    """The examples each invariant judged at the steps where it broke, from the coverage stats
    records (``event: coverage``, ``coverage.judged``) of any ranks."""
    out: Judged = {}
    for record in stats:
        coverage = record.get("coverage")
        judged = coverage.get("judged") if isinstance(coverage, dict) else None
        if not isinstance(judged, dict):
            continue
        for inv_id, traces in judged.items():
            for trace, steps in (traces.items() if isinstance(traces, dict) else ()):
                for step, count in (steps.items() if isinstance(steps, dict) else ()):
                    if type(count) is int and str(step).lstrip("-").isdigit():
                        key = (_trace_key(trace, record.get("rank")), str(inv_id), int(step))
                        out[key] = out.get(key, 0) + count
    return out


def _record_trace(record: dict[str, Any]) -> str:
    evidence = record.get("evidence")
    trace = evidence.get("trace") if isinstance(evidence, dict) else None
    return _trace_key(trace, record.get("rank")) if trace else ""


def triage(records: list[dict[str, Any]], invariants: dict[str, Invariant] | None = None,
           judged: Judged | None = None) -> list[Group]:
    """Group ``records`` (violation records, any ranks, any order) and rank the groups, the
    likely root cause first. ``invariants`` (by id) adds what the records do not carry;
    ``judged`` (``judged_counts``) lets a group say "N of M" variables."""
    invariants = invariants or {}
    judged = judged or {}
    buckets: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in distinct_violations(records):
        inv = invariants.get(str(record.get("invariant", "")))
        relation = str(record.get("relation") or (inv.relation if inv else ""))
        buckets.setdefault((relation, _subject_of(record, inv)), []).append(record)

    groups = []
    for (relation, subject), bucket in buckets.items():
        for window in _windows(bucket):
            groups.append(_group(relation, subject, window, invariants, judged))
    groups.sort(key=_rank_key)
    earliest = min((g.first_step for g in groups if g.first_step is not None), default=None)
    for position, group in enumerate(groups):
        group.rank_reason = _reason(group, position, earliest)
        group.same_cause_as = _same_cause(group, groups[:position])
    return groups


def causes(groups: list[Group]) -> list[tuple[Group, list[Group]]]:
    """The ranked groups as likely causes: each group that leads (``same_cause_as`` is None)
    with the later groups of the same cause, in rank order. One fault that breaks a state
    invariant and an ordering one reads as one cause."""
    led: dict[int, list[Group]] = {}
    for group in groups:
        if group.same_cause_as is not None:
            led.setdefault(group.same_cause_as, []).append(group)
    return [(group, led.get(number, [])) for number, group in enumerate(groups, start=1)
            if group.same_cause_as is None]


def _same_cause(group: Group, earlier: list[Group]) -> int | None:
    """The number of the first earlier group of the same usual cause with overlapping steps."""
    if not group.cause or group.first_step is None:
        return None
    for number, other in enumerate(earlier, start=1):
        if (other.cause == group.cause and other.same_cause_as is None and other.first_step is not None
                and other.last_step is not None and group.last_step is not None
                and other.first_step <= group.last_step and group.first_step <= other.last_step):
            return number
    return None


def _group(relation: str, subject: str, records: list[dict[str, Any]],
           invariants: dict[str, Invariant], judged: Judged) -> Group:
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
    key = f"{relation}|{subject}|{'' if first is None else first}"
    group = Group(key=key, relation=relation, subject=subject, pattern=pattern, first_step=first,
                  last_step=steps[-1] if steps else None, count=len(records), ranks=ranks,
                  variables=variables, apis=apis, invariants=ids, expected="; ".join(expected),
                  support=support, kind=relation_kind(relation), example=records[0], steps=steps,
                  records=records, patterns=name_patterns(variables))
    _describe(group, invariants, judged)
    return group


def _main_record(group: Group) -> dict[str, Any]:
    """The first record of the invariant with the most violations in the group: what the
    group's sentence and hint speak of."""
    counts: dict[str, int] = {}
    for record in group.records:
        inv_id = str(record.get("invariant", ""))
        counts[inv_id] = counts.get(inv_id, 0) + 1
    main = min(counts, key=lambda inv_id: (-counts[inv_id], inv_id))
    return next(r for r in group.records if str(r.get("invariant", "")) == main)


def _invariant_subject(record: dict[str, Any], invariant: Invariant | None) -> dict[str, Any]:
    subject = _about(record, invariant, "subject")
    return dict(subject) if isinstance(subject, dict) else {}


def _at_first(group: Group, main: str, judged: Judged) -> tuple[int, int] | None:
    """(variables broken, variables judged) by the main invariant at the group's first step,
    when that step broke in one trace whose judged count is known and covers them all."""
    first = [r for r in group.records if str(r.get("invariant", "")) == main and _step(r) == group.first_step]
    traces = {_record_trace(r) for r in first}
    if group.first_step is None or len(traces) != 1 or "" in traces:
        return None
    total = judged.get((traces.pop(), main, group.first_step))
    broken = len({str(r["variable"]) for r in first if r.get("variable")})
    if total is None or not broken or broken > total:
        return None
    return broken, total


def _describe(group: Group, invariants: dict[str, Invariant], judged: Judged) -> None:
    """Fill in the group's sentence and hint (and ``of_total``) from its main invariant."""
    record = _main_record(group)
    inv = invariants.get(str(record.get("invariant", "")))
    subject = _invariant_subject(record, inv)
    found = find_hint(group.relation, api_of(record, subject), what_of(subject))
    group.hint = found.hint if found is not None else ""
    group.cause = found.cause if found is not None else ""
    expected = ""
    if found is not None:
        happened = found.happened
    else:
        happened = f"{group.relation} of {group.subject} broke"
        expected = plain_expected(record) or (inv.description if inv is not None else "")
    at_first = _at_first(group, str(record.get("invariant", "")), judged)
    group.of_total = at_first[1] if at_first is not None else None
    noun = "parameters" if subject.get("attribute") in ("data", "grad") else "variables"
    group.sentence = group_sentence(happened, group.variables, noun, group.first_step, group.last_step,
                                    group.ranks, at_first)
    if expected:
        group.sentence += f" (expected: {expected})"


def _rank_key(group: Group) -> tuple:
    first = group.first_step
    return (first is None, first if first is not None else 0, _KIND_ORDER[group.kind],
            -group.support, group.relation, _moment(group.subject), group.key)


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


__all__ = ["STEP_WINDOW", "Group", "causes", "distinct_violations", "Judged", "describe_patterns", "judged_counts", "name_patterns",
           "relation_kind", "triage", "variable_pattern"]
