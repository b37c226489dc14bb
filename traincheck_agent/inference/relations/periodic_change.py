"""VarPeriodicChange: a scalar attribute of a variable changes with a period and stays constant
otherwise, e.g. the ``lr`` of an optimizer param group under ``StepLR(step_size=K)`` changes
every K steps, under a cosine / exponential schedule at every step. A forgotten
``scheduler.step()``, a doubled one, or one on another cadence breaks it.

Examples are pairs of consecutive *recorded* snapshots of one (point, vtype, variable,
attribute) in one trace: the value at the last record of step ``a`` and at step ``b > a``.
Snapshots are sampled (every step in the policy's warmup, then every N), so a pair may span
several steps. A hypothesis "changes exactly at the steps s with s = offset (mod period)" expects
``c`` changes in (a, b]: c = 0 means the value must be equal, c = 1 that it must differ; with
c >= 2 the value may have changed and come back (warm restarts, cycles), so the pair is not
judged. The period and offset are learned from changes seen between adjacent steps (b = a + 1):
the gcd of their distances, then checked against every pair of every reference.
A schedule may settle for good at a bound it was heading for (nanoGPT's cosine decay reaches
``min_lr`` and stays there; a warm-up may end on a plateau), at a step the references never
reached. So, when checking, an attribute that stays where a change was expected, at the lowest
value this run has held after a decrease (the highest after an increase), is not judged: it is
*held at a bound*, not covered. An lr that never changes at all in the run is still judged from
its first pair, and a reference that holds its value anywhere breaks "changes at every step".
A param group's attributes are judged only where an LR scheduler is attached as it was in the
references (``lr_scheduled``: the group carries the ``initial_lr`` every scheduler sets) and of
the same class (``lr_scheduler``: the class whose ``step`` was called last, from its call
records): a run that adds a warm-up, drops the schedule or swaps it for another changes its lr
by design, not by a fault, while a scheduler created but never stepped, or stepped twice, still
shows (its constructor steps it once).
An attribute that never changes in any reference, over at least ``MIN_CONSTANT_STEPS`` recorded
steps, gets the degenerate form, period 0: it stays constant across steps (a hyper-parameter
such as ``momentum`` or ``weight_decay`` that nothing should touch while training runs). Its
value may differ between references (another lr is still a constant lr).
"""

from __future__ import annotations

import math
from functools import reduce
from typing import Any, NamedTuple

from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import (
    deduce,
    domain_of,
    holds_all,
    with_condition,
)
from traincheck_agent.inference.relations import Needs
from traincheck_agent.inference.stream import SnapshotCollector, TraceSource
from traincheck_agent.policy.model import DESCRIBE_NONE, DESCRIBE_SUMMARY
from traincheck_agent.trace.schema import KIND_CALL, KIND_SNAPSHOT
from traincheck_agent.trace.snapshot import blocks_of

RELATION = "VarPeriodicChange"
LEARNS_FROM = "numeric state (such as the lr) recorded over several steps"  # what its examples come from: said when it learns nothing
ID_PREFIX = "vp"  # of its invariants' ids
SUBJECT_FIELDS = ("event", "vtype", "variable", "attribute", "period", "offset")  # the subject fields it reads when it checks
TRIAGE_KIND = "state"  # how triage ranks its violations (``relations.TRIAGE_KINDS``)
READS = (KIND_SNAPSHOT, KIND_CALL)  # snapshots, and the calls of LR schedulers' ``step``
MIN_CHANGES = 3  # changes a hypothesis must have seen, over all references
MIN_CONSTANT_STEPS = 5  # recorded steps a constant must have been seen over
CONSTANT = 0  # the period of an attribute that never changes
PARAM_GROUP = "param_group"
SCHEDULED = "lr_scheduled"  # feature of a param group's attributes: an LR scheduler set its initial_lr
SCHEDULER = "lr_scheduler"  # feature of a param group's attributes: the class of the scheduler stepped last
DOMAIN_FIELDS = (SCHEDULED, SCHEDULER)  # judged only where the references showed the same (param groups only)
SCHEDULERS = "torch.optim.lr_scheduler."
SCHEDULER_STEP = SCHEDULERS + "LRScheduler.step"  # the step every scheduler that keeps it runs

# (point, vtype, variable, attribute)
Key = tuple[str, str, str, str]


class ChangeExample(NamedTuple):
    """One attribute of one variable at two consecutive recorded steps of one trace."""

    where: str
    vtype: str
    var: str
    attribute: str
    prev_step: int
    step: int
    before: float
    after: float
    trace: str
    features: tuple[tuple[str, Any], ...]
    at_bound: bool = False  # unchanged at the extreme this run's last change headed for

    def feature_map(self) -> dict[str, Any]:  # FeatureExample's: a NamedTuple cannot inherit it
        return dict(self.features)

    @property
    def changed(self) -> bool:
        return self.before != self.after

    @property
    def adjacent(self) -> bool:
        return self.step == self.prev_step + 1


def expected_changes(prev_step: int, step: int, period: int, offset: int) -> int:
    """How many steps s in (prev_step, step] have s = offset (mod period); none for a constant."""
    if period == CONSTANT:
        return 0
    return (step - offset) // period - (prev_step - offset) // period


def _first_expected(prev_step: int, period: int, offset: int) -> int:
    start = prev_step + 1
    return start + (offset - start) % period


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class Collector(SnapshotCollector):
    """Pairs of consecutive recorded steps; only the latest two steps of each key are held. A
    checker's collector (``wanted`` set) follows the watched variables only."""

    def __init__(self, source: TraceSource) -> None:
        super().__init__(source)
        # last record of the newest step seen: step, value and the example's features
        self.latest: dict[Key, tuple[int, float, tuple[tuple[str, Any], ...]]] = {}
        self.settled: dict[Key, tuple[int, float]] = {}  # value at the last complete step before it
        self.trend: dict[Key, tuple[int, float, float]] = {}  # last change's sign, lowest, highest
        self._watched: tuple[Any, frozenset[tuple[str, str, str]]] = (None, frozenset())
        self.scheduler: str | None = None  # the class of the LR scheduler stepped last

    def feed_other(self, record: dict[str, Any]) -> list[ChangeExample]:
        api = record.get("api")
        if record.get("kind") == KIND_CALL and isinstance(api, str) and api.startswith(SCHEDULERS) \
                and api.endswith(".step"):
            receiver = (record.get("args") or {}).get("self")
            kind = receiver.get("t") if isinstance(receiver, dict) else None
            if isinstance(kind, str):
                self.scheduler = kind
        return []

    def _pair(self, key: Key, prev: tuple[int, float], cur: tuple[int, float, tuple[tuple[str, Any], ...]]
              ) -> ChangeExample:
        where, vtype, var, attribute = key
        before, after = prev[1], cur[1]
        direction, low, high = self.trend.get(key, (0, before, before))
        at_bound = after == before and ((direction < 0 and after <= low) or (direction > 0 and after >= high))
        if after != before:
            direction = 1 if after > before else -1
        self.trend[key] = (direction, min(low, after), max(high, after))
        return ChangeExample(where, vtype, var, attribute, prev[0], cur[0], before, after, self.source.label,
                             cur[2], at_bound)

    def feed_snapshot(self, record: dict[str, Any]) -> list[ChangeExample]:
        step = record.get("step")
        if not isinstance(step, int) or step < 0:
            return []  # no training step yet: nothing to be periodic against
        where, phase = str(record.get("where", "")), str(record.get("phase"))
        watched = self._watched_variables()
        out: list[ChangeExample] = []
        for block in blocks_of(record):
            for i, var in enumerate(block.names):
                head = (where, str(block.vtypes[i]), var)
                if watched is None or head in watched:
                    self._variable(head, step, phase, block.attrs(i), out)
        return out

    def _watched_variables(self) -> frozenset[tuple[str, str, str]] | None:
        """The (point, vtype, variable) of the watched keys (None: every variable is)."""
        wanted = self.wanted
        if wanted is None:
            return None
        if self._watched[0] is not wanted:
            self._watched = (wanted, frozenset(key[:3] for key in wanted))  # type: ignore[index]
        return self._watched[1]

    def _variable(self, head: tuple[str, str, str], step: int, phase: str, attrs: dict[str, Any],
                  out: list[ChangeExample]) -> None:
        """Follow the numeric attributes of one variable; pairs it completes go to ``out``."""
        wanted = self.wanted
        features = _features(head[1], phase, attrs, self.scheduler)
        for attribute, value in attrs.items():
            key = (*head, attribute)
            if not _numeric(value) or (wanted is not None and key not in wanted):
                continue
            held = self.latest.get(key)
            if held is not None and step != held[0]:
                if step < held[0]:
                    continue
                if key in self.settled:
                    out.append(self._pair(key, self.settled[key], held))
                self.settled[key] = (held[0], held[1])
            self.latest[key] = (step, value, features)  # within a step, the last record wins

    def finish(self) -> list[ChangeExample]:
        return [self._pair(key, self.settled[key], held) for key, held in self.latest.items() if key in self.settled]


def _features(vtype: str, phase: str, attrs: dict[str, Any], scheduler: str | None
              ) -> tuple[tuple[str, Any], ...]:
    if vtype == PARAM_GROUP:
        return (SCHEDULED, "initial_lr" in attrs), (SCHEDULER, scheduler), ("phase", phase)
    return (("phase", phase),)


def key_of(example: ChangeExample) -> Key:
    return example.where, example.vtype, example.var, example.attribute


def invariant_key(invariant: Invariant) -> Key:
    s = invariant.subject
    return s["event"], s["vtype"], s["variable"], s["attribute"]


def finalize(groups: dict[Key, list[ChangeExample]]) -> dict[Key, list[ChangeExample]]:
    for group in groups.values():
        group.sort(key=lambda e: (e.trace, e.step))
    return groups


def _judge(example: ChangeExample, period: int, offset: int, checking: bool = False) -> bool | None:
    """True when the pair agrees with the hypothesis, False when not, None when it cannot tell.

    A value held at a bound is left undecided only when checking: a reference that holds its lr
    (a plateau at the end of a warm-up) shows that it does not change at every step, and a
    hypothesis it breaks is not learned."""
    count = expected_changes(example.prev_step, example.step, period, offset)
    if count >= 2 or (checking and count == 1 and example.at_bound):
        return None
    return example.changed == (count == 1)


def _period(group: list[ChangeExample]) -> tuple[int, int] | None:
    """(period, offset) from the changes seen between adjacent steps, or None."""
    steps = sorted({e.step for e in group if e.changed and e.adjacent})
    if len(steps) < 2:
        return None
    period = reduce(math.gcd, (s - steps[0] for s in steps[1:]))
    return period, steps[0] % period


def _describe(key: Key, period: int, offset: int) -> str:
    where, vtype, var, attribute = key
    subject = f"the {attribute} of {var} ({vtype}) at {where}"
    if period == CONSTANT:
        return f"{subject} stays constant across steps"
    if period == 1:
        return f"{subject} changes at every step"
    first = offset or period
    return (f"{subject} changes every {period} steps (at steps {first}, {first + period}, "
            f"{first + 2 * period}, ...) and stays constant in between")


def infer(groups: dict[Key, list[ChangeExample]], sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for key, group in sorted(groups.items()):
        changes = sum(e.changed for e in group)
        if changes == 0 and len({(e.trace, e.step) for e in group}) >= MIN_CONSTANT_STEPS:
            found: tuple[int, int] | None = (CONSTANT, 0)
        elif changes < MIN_CHANGES:
            continue  # too few changes to speak of a period
        else:
            found = _period(group)
        if found is None:
            continue
        period, offset = found
        verdicts = [(e, _judge(e, period, offset)) for e in group]
        passing = [e for e, ok in verdicts if ok is True]
        failing = [e for e, ok in verdicts if ok is False]
        if period != CONSTANT and sum(e.changed for e in passing) < MIN_CHANGES:
            continue
        precondition = deduce([e.feature_map() for e in passing], [e.feature_map() for e in failing])
        if precondition is None:
            continue  # some reference breaks it
        where, vtype, var, attribute = key
        invariants.append(Invariant(
            relation=RELATION,
            subject={"event": where, "vtype": vtype, "variable": var, "attribute": attribute,
                     "period": period, "offset": offset},
            precondition=tuple(precondition),
            support={"passing": len(passing), "excluded": len(failing),
                     "changes": sum(e.changed for e in passing),
                     "unjudged": len(group) - len(passing) - len(failing),
                     "steps": len({e.step for e in passing}), "traces": len({e.trace for e in group})},
            description=with_condition(_describe(key, period, offset), precondition),
            sources=sources,
            domain=domain_of([e.feature_map() for e in passing], DOMAIN_FIELDS) if vtype == PARAM_GROUP else {},
        ))
    return invariants


HELD_AT_BOUND = "held at the bound its schedule reached"


def outside(invariant: Invariant, e: ChangeExample) -> str | None:
    """A change expected of a value that settled where this run's schedule was heading."""
    s = invariant.subject
    if e.at_bound and expected_changes(e.prev_step, e.step, s["period"], s["offset"]) == 1:
        return HELD_AT_BOUND
    return None


def violates(invariant: Invariant, e: ChangeExample) -> bool:
    """The pair satisfies the precondition and shows a change where none was expected, or none
    where exactly one was."""
    s = invariant.subject
    return (holds_all(invariant.precondition, e.feature_map())
            and _judge(e, s["period"], s["offset"], checking=True) is False)


def violation(invariant: Invariant, ex: ChangeExample) -> dict[str, Any]:
    period, offset = invariant.subject["period"], invariant.subject["offset"]
    span = f"at step {ex.step}" if ex.adjacent else f"between steps {ex.prev_step} and {ex.step}"
    if ex.changed:
        what = f"{ex.attribute} changed from {ex.before!r} to {ex.after!r} {span}, where no change was expected"
    elif ex.adjacent:
        what = f"{ex.attribute} stayed {ex.before!r} {span}, where a change was expected"
    else:
        due = _first_expected(ex.prev_step, period, offset)
        what = f"{ex.attribute} stayed {ex.before!r} {span}, where a change was expected at step {due}"
    return {"step": ex.step, "variable": ex.var, "trace": ex.trace,
            "message": f"{invariant.description}: {what}"}


# Which state item records variables of a vtype; parameters are the rest.
_ITEM_OF_VTYPE = {"param_group": "optimizer.hyperparams", "optimizer_settings": "optimizer.hyperparams",
                  "optimizer_state": "optimizer.state", "buffer": "buffers"}


def needs(req: Needs, inv: Invariant) -> None:
    """The snapshot point's item that records its variable; for a param group, the steps of the
    LR schedulers (the references' classes, and every one that keeps the base class's step)."""
    point, vtype = inv.subject["event"], inv.subject["vtype"]
    if vtype == PARAM_GROUP:
        req.need_call(SCHEDULER_STEP, DESCRIBE_SUMMARY, DESCRIBE_NONE)
        for kind in inv.domain.get(SCHEDULER, ()):
            if isinstance(kind, str) and kind.isidentifier():
                req.need_call(f"{SCHEDULERS}{kind}.step", DESCRIBE_SUMMARY, DESCRIBE_NONE)
    item = _ITEM_OF_VTYPE.get(vtype)
    if item is None:  # a parameter class: its numeric framework attributes ride on its records
        had = req.policy_items(point) & {"params.data", "params.grad"}
        item = "params.data" if "params.data" in had or not had else "params.grad"
    req.need_state(point, [item])
