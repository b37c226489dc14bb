"""GradApplied, a model-level relation: every parameter that backward gives a non-zero grad is
changed by an optimizer step in the same iteration.

Per-call transitions judge the parameters a step holds; they cannot see a parameter that no
optimizer holds at all. An optimizer built over the wrong parameters (a frozen backbone instead
of the trainable head) steps over parameters without grads, which is what a correct fine-tune
that hands every parameter to its optimizer also does, while the head gets its grads and is
never updated. The fault shows only at the level of the model: grads that no step applies.

One example per parameter and iteration in which it got a non-zero grad (after some backward of
the iteration) and some optimizer step ran: it passes when a step of that iteration changed the
parameter's data. Gradient accumulation keeps one iteration per step; a step whose update is
below the data's float resolution is undecided and counts as applied (``update_negligible``).
A step whose learning rate is too small for the update to show (a schedule ending near zero) is
undecided too. Iterations without an optimizer step give no examples, and neither does a last
iteration that the optimizers of the one before did not all step (a GAN's generator update after
the discriminator's last step). A parameter that an optimizer step held earlier in the run but
none held in this iteration belongs to an optimizer that did not step this time (a GAN's
generator, given grads by the discriminator's backward while the critic trains alone): its
unapplied grad is not covered, since its own optimizer's next step was never due. A parameter
that no step has ever held is judged from the first iteration. Examples complete when the step
moves on, or at the end of the
trace. An unapplied grad is judged once the next iteration's own work (a ``zero_grad``, a
backward) begins: a second optimizer that steps after the clock's (the clock counts its step in
the next iteration, before that work) applies it there.

The same examples say whether the grad reached the step: a second invariant, "every parameter
that backward gives a non-zero grad reaches optimizer.step with a non-zero grad", catches what
zeroes grads between the two (``clip_grad_norm_`` with ``max_norm=0``, a stray ``zero_grad``)
while momentum or weight decay still move the parameters. An example whose grad at the step is
not held there (None, a ZeRO partition) or has no fingerprint says nothing about it.

Each example also carries ``steps``, the optimizer step APIs of its iteration (read from the
step calls' records): an optimizer whose rule may skip an update (Rprop, on a change of the
grad's sign) is scoped apart by a precondition instead of costing every other optimizer the
invariant. ``steps`` is not part of the domain: a parameter that no optimizer holds is judged in
an iteration of any optimizer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from traincheck_agent.inference.examples import (
    DESCRIPTIVE_ATTRS,
    NO_FINGERPRINT,
    NONE,
    NONZERO,
    ZERO,
    LearningRates,
    param_features,
    step_lr_of,
    unfingerprinted,
    update_negligible,
    value_class,
)
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import (
    ANY,
    holds_all,
)
from traincheck_agent.inference.relations import Needs
from traincheck_agent.inference.scoped import scoped_invariants
from traincheck_agent.inference.stream import SnapshotCollector, TraceSource
from traincheck_agent.policy.model import DESCRIBE_NONE
from traincheck_agent.trace.schema import KIND_CALL, KIND_SNAPSHOT
from traincheck_agent.trace.snapshot import blocks_of

RELATION = "GradApplied"
LEARNS_FROM = "optimizer steps with the parameters and grads snapshotted around them"  # what its examples come from: said when it learns nothing
ID_PREFIX = "ga"  # of its invariants' ids
SUBJECT_FIELDS = ("event", "attribute", "effect")  # the subject fields it reads when it checks
TRIAGE_KIND = "state"  # how triage ranks its violations (``relations.TRIAGE_KINDS``)
READS = (KIND_SNAPSHOT, KIND_CALL)  # the record kinds its collector reads: state, a snapshot point at a time
MIN_PASSING = 5
MIN_STEPS = 2
KEY = "params"  # one group: every parameter of every model
GRAD_POINT, BEFORE_STEP, AFTER_STEP = "after:backward", "before:optimizer.step", "after:optimizer.step"
POINTS = frozenset({GRAD_POINT, BEFORE_STEP, AFTER_STEP})
DOMAIN_FIELDS = ("vtype", "phase", *DESCRIPTIVE_ATTRS)
APPLIED, ARRIVED = "applies_every_grad", "receives_every_grad"  # the two effects
DESCRIPTIONS = {
    APPLIED: "every parameter that backward gives a non-zero grad is changed by an optimizer step in the same "
             "iteration",
    ARRIVED: "every parameter that backward gives a non-zero grad reaches optimizer.step with a non-zero grad",
}


class AppliedExample(NamedTuple):
    var: str
    step: int
    trace: str
    applied: bool
    features: tuple[tuple[str, Any], ...]
    # The grad and the step's data were fingerprinted: whether the step applied it is known.
    fingerprinted: bool = True
    # Whether the grad was still non-zero when a step of the iteration received it (None: no
    # step snapshot held it, or without a fingerprint).
    arrived: bool | None = None
    # An optimizer step held the parameter earlier in the run, but none of this iteration did.
    not_stepped: bool = False

    def feature_map(self) -> dict[str, Any]:  # FeatureExample's: a NamedTuple cannot inherit it
        return dict(self.features)


class Collector(SnapshotCollector):
    def __init__(self, source: TraceSource) -> None:
        super().__init__(source)
        self.step: Any = None
        self.grads: dict[str, tuple[tuple[str, Any], ...]] = {}  # parameters with a grad this iteration
        self.applied: set[str] = set()  # parameters a step of this iteration changed
        self.unchanged: dict[str, tuple[Any, dict[str, Any]]] = {}  # the others: step call, attrs before
        self.unknown: set[str] = set()  # parameters whose grad or data has no fingerprint
        self.arrived: dict[str, bool] = {}  # parameters with a grad: whether a step received it non-zero
        self.call_lr: dict[Any, float] = {}  # the smallest learning rate of each step call
        self.stepped = False  # some optimizer step ran in this iteration
        self.stepped_by: set[str] = set()  # the optimizers that did (their param groups' owners)
        self.previous_by: set[str] = set()  # those of the last closed iteration
        self.pending: dict[tuple[Any, str], dict[str, Any]] = {}  # before:optimizer.step halves
        self.rates = LearningRates()
        # Unapplied grads of the last closed iteration: a step that the clock counts in the next
        # iteration (a second optimizer stepping after the first) may still apply them before
        # the parameter's next grad.
        self.carried: dict[str, AppliedExample] = {}
        self.step_calls: set[Any] = set()  # the step calls of this iteration
        self.step_apis: set[str] = set()  # and their APIs, once their records arrive
        self.held: set[str] = set()  # parameters an optimizer step held so far in the run
        self.held_now: set[str] = set()  # those a step of this iteration held

    def feed_other(self, record: dict[str, Any]) -> list[AppliedExample]:
        if record.get("kind") == KIND_CALL and record.get("id") in self.step_calls:
            self.step_apis.add(str(record.get("api")))
        return []

    def feed_snapshot(self, record: dict[str, Any]) -> list[AppliedExample]:
        out = []
        step = record.get("step")
        if step != self.step:
            out = self._close_iteration()
            self.step = step
        where = record.get("where")
        if self.carried and where not in (BEFORE_STEP, AFTER_STEP):
            # The next iteration's own work (zero_grad, backward) has begun: no late step of the
            # one before can come any more.
            out += self.carried.values()
            self.carried = {}
        if where not in POINTS:
            return out
        point = (where, record.get("call"), record.get("phase"))
        for block in blocks_of(record):
            for i, var in enumerate(block.names):
                self._variable(point, var, block.vtypes[i], block.owners[i], block.attrs(i), out)
        return out

    def _variable(self, point: tuple[Any, Any, Any], var: str, vtype: Any, owner: Any, attrs: dict[str, Any],
                  out: list[AppliedExample]) -> None:
        """Follow one variable of a snapshot at one of ``POINTS`` (where, call, phase); the
        examples it completes go to ``out``."""
        where, call, phase = point
        if where == GRAD_POINT:
            if attrs.get("requires_grad") is not False and value_class(attrs.get("grad")) == NONZERO:
                self.grads[var] = param_features(vtype, phase, attrs)
                if unfingerprinted(attrs.get("grad")):
                    self.unknown.add(var)
        elif where == BEFORE_STEP:
            self.pending[(call, var)] = attrs
            self.held_now.add(var)
            self.step_calls.add(call)
            grad = attrs.get("grad")
            if var in self.grads and var not in self.arrived and not unfingerprinted(grad):
                received = value_class(grad)
                if received != NONE:
                    self.arrived[var] = received != ZERO
        else:  # AFTER_STEP
            lr = self.rates.observe_rate(var, step_lr_of(vtype, where, attrs))
            if lr is not None:
                self.call_lr[call] = min(lr, self.call_lr.get(call, lr))
                self.stepped_by.add(str(owner))
                return
            before = self.pending.pop((call, var), None)
            if before is not None and isinstance(before.get("data"), dict) and isinstance(attrs.get("data"), dict):
                self.stepped = True
                if unfingerprinted(before["data"]) or unfingerprinted(attrs["data"]):
                    self.unknown.add(var)
                elif before["data"].get("h") != attrs["data"].get("h") or update_negligible(before):
                    self.applied.add(var)
                    late = self.carried.pop(var, None)
                    if late is not None:
                        out.append(late._replace(applied=True))
                else:
                    self.unchanged[var] = (call, before)

    def finish(self) -> list[AppliedExample]:
        if self.previous_by and not self.previous_by <= self.stepped_by:
            self.stepped = False  # a partial last iteration
        out = self._close_iteration()
        out += self.carried.values()
        self.carried = {}
        return out

    def _close_iteration(self) -> list[AppliedExample]:
        out = list(self.carried.values())  # grads of the iteration before that nothing applied since
        self.carried = {}
        if self.stepped and isinstance(self.step, int):
            label = self.source.label
            applied = self.applied | {var for var, (call, before) in self.unchanged.items()
                                      if update_negligible(before, self.call_lr.get(call))}
            steps = ("steps", "+".join(sorted(self.step_apis)))
            for var, features in self.grads.items():
                example = AppliedExample(var, self.step, label, var in applied, tuple(sorted((*features, steps))),
                                         var not in self.unknown, self.arrived.get(var),
                                         var in self.held and var not in self.held_now)
                if example.applied or not example.fingerprinted:
                    out.append(example)
                else:
                    self.carried[var] = example
            self.previous_by = self.stepped_by
        self.held |= self.held_now
        self.held_now = set()
        self.grads, self.applied, self.unchanged, self.stepped, self.stepped_by = {}, set(), {}, False, set()
        self.unknown = set()
        self.arrived = {}
        self.pending.clear()
        self.call_lr.clear()
        self.step_calls.clear()
        self.step_apis.clear()
        return out


def key_of(example: AppliedExample) -> str:
    return KEY


def invariant_key(invariant: Invariant) -> str:
    return KEY


def _verdict(effect: str, e: AppliedExample) -> bool | None:
    """Whether the example shows the effect; None when it cannot tell."""
    if not e.fingerprinted or (effect == APPLIED and e.not_stepped and not e.applied):
        return None
    return e.applied if effect == APPLIED else e.arrived


def infer(groups: dict[str, list[AppliedExample]], sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for effect, description in DESCRIPTIONS.items():
        def holds(e: AppliedExample, effect: str = effect) -> bool:
            return bool(_verdict(effect, e))

        invariants += scoped_invariants(
            [e for e in groups.get(KEY, []) if _verdict(effect, e) is not None], holds, relation=RELATION,
            subject={"event": "optimizer.step", "attribute": "data" if effect == APPLIED else "grad", "effect": effect},
            description=description, sources=sources, domain_fields=DOMAIN_FIELDS, min_passing=MIN_PASSING,
            min_steps=MIN_STEPS)
    return invariants


def outcome(e: AppliedExample) -> tuple[Any, ...]:
    """What ``outside`` and ``violates`` read of an example besides its group and features."""
    return e.applied, e.fingerprinted, e.arrived, e.not_stepped


NOT_STEPPED = "its optimizer did not step in this iteration"


def outside(invariant: Invariant, e: AppliedExample) -> str | None:
    """A parameter without a fingerprint: whether the step applied its grad is unknown; one whose
    optimizer did not step in the iteration: nothing was due to apply it."""
    if not e.fingerprinted:
        return NO_FINGERPRINT
    if e.not_stepped and not e.applied and invariant.subject.get("effect", APPLIED) == APPLIED:
        return NOT_STEPPED
    return None


def violates(invariant: Invariant, e: AppliedExample) -> bool:
    return (_verdict(invariant.subject.get("effect", APPLIED), e) is False
            and holds_all(invariant.precondition, e.feature_map()))


def violation(invariant: Invariant, ex: AppliedExample) -> dict[str, Any]:
    if invariant.subject.get("effect") == ARRIVED:
        why = (f"{ex.var} had a non-zero grad after backward at step {ex.step}, and the optimizer step received it "
               "zero (clipped with max_norm=0, or cleared between backward and the step?)")
    else:
        why = (f"{ex.var} had a non-zero grad at step {ex.step} that no optimizer step applied (is it in an "
               "optimizer's param groups?)")
    return {"step": ex.step, "variable": ex.var, "trace": ex.trace, "message": f"{invariant.description}: {why}"}


def needs(req: Needs, inv: Invariant) -> None:
    """The grads backward leaves, and the data (and grad, for negligible updates) around steps."""
    req.need_state(GRAD_POINT, req.items_for(GRAD_POINT, "grad"))
    for point in (BEFORE_STEP, AFTER_STEP):
        req.need_state(point, req.items_for(point, "data"))
    req.need_state(BEFORE_STEP, req.items_for(BEFORE_STEP, "grad"))
    req.need_state(AFTER_STEP, ["optimizer.hyperparams"])  # the learning rate a step used
    for api in _step_apis(inv.precondition):  # a precondition on the iteration's optimizer steps
        req.need_call(api, DESCRIBE_NONE, DESCRIBE_NONE)


def _step_apis(clauses: Iterable[Any]) -> set[str]:
    """The optimizer step APIs that clauses on ``steps`` name."""
    out: set[str] = set()
    for clause in clauses:
        if clause.kind == ANY:
            out |= _step_apis(clause.value)
        elif clause.field == "steps":
            values = clause.value if isinstance(clause.value, (tuple, list)) else (clause.value,)
            out |= {api for value in values if isinstance(value, str) for api in value.split("+") if api}
    return out
