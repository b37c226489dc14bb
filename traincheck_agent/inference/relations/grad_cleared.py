"""GradCleared, a model-level relation: "the grad an optimizer step applies to a parameter was
cleared since that parameter's previous step".

A forgotten ``zero_grad`` adds every step's grad to all the ones before: no error, a loss that
still falls at first. Per-call transitions cannot tell it from correct programs. "backward finds
the grad zero" fails where a GAN's generator loss runs backward through the discriminator, and
where gradient accumulation runs several backwards per step. What every correct loop shares is
that no grad is applied twice: between two steps over a parameter its grad is cleared, by an
optimizer's or a module's ``zero_grad``, by setting it to None, or by a step that clears it.

One example per parameter and optimizer step call that receives a non-zero grad for it, when the
parameter was stepped before and a backward has changed its grad since (its hash after the
backward differs from the one before): it passes when some snapshot since the parameter's
previous step showed the grad None or zero (after a ``zero_grad``, before a backward, wherever the
policy snapshots grads). A grad no backward changed is one the program assigned (``p.grad =
...``, averaged in from other models): replacing it is its way of clearing. Several iterations
between two steps of a parameter (an optimizer that steps every other iteration) are fine; an
iteration without snapshots (sampled out) forgets every parameter's history. The example is
complete at the step's before-snapshot, so a checker judges it before the step runs. A
parameter's first step gives none (the trace may begin mid-run), and neither does a second step
over the same parameter in one iteration (two optimizers holding it). Grads without a
fingerprint say neither that they were cleared nor that they were applied.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from traincheck_agent.inference.examples import (
    DESCRIPTIVE_ATTRS,
    NONE,
    ZERO,
    param_features,
    unfingerprinted,
    value_class,
)
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import holds_all
from traincheck_agent.inference.relations import Needs
from traincheck_agent.inference.scoped import scoped_invariants
from traincheck_agent.inference.stream import SnapshotCollector, TraceSource
from traincheck_agent.trace.schema import KIND_SNAPSHOT
from traincheck_agent.trace.snapshot import ABSENT, blocks_of

RELATION = "GradCleared"
LEARNS_FROM = "optimizer steps over parameters whose grads are snapshotted between steps"  # what its examples come from: said when it learns nothing
ID_PREFIX = "gc"  # of its invariants' ids
SUBJECT_FIELDS = ("event", "attribute", "effect")  # the subject fields it reads when it checks
TRIAGE_KIND = "state"  # how triage ranks its violations (``relations.TRIAGE_KINDS``)
READS = (KIND_SNAPSHOT,)  # the record kinds its collector reads: state, a snapshot point at a time
MIN_PASSING = 5
MIN_STEPS = 2
KEY = "params"  # one group: every parameter of every model
EVENT = "optimizer.step"
BEFORE_STEP, AFTER_STEP = f"before:{EVENT}", f"after:{EVENT}"
BEFORE_BACKWARD, AFTER_BACKWARD = "before:backward", "after:backward"
# Where a cleared grad shows: after a zero_grad, before a backward (a grad set to None by hand),
# and the steps themselves (an optimizer that clears what it applied).
CLEARING_POINTS = ("after:zero_grad", BEFORE_BACKWARD, BEFORE_STEP, AFTER_STEP)
POINTS = (*CLEARING_POINTS, AFTER_BACKWARD)  # and what a backward added to the grad
_UNSEEN = object()  # no snapshot before the backward: whether it added to the grad is unknown
EFFECT = "cleared_between_steps"
DOMAIN_FIELDS = ("vtype", "phase", *DESCRIPTIVE_ATTRS)
DESCRIPTION = "the grad an optimizer step applies was cleared (zero_grad, or set to None) since the parameter's previous step"


class ClearedExample(NamedTuple):
    var: str
    step: int
    trace: str
    cleared: bool
    features: tuple[tuple[str, Any], ...]

    def feature_map(self) -> dict[str, Any]:  # FeatureExample's: a NamedTuple cannot inherit it
        return dict(self.features)


class Collector(SnapshotCollector):
    def __init__(self, source: TraceSource) -> None:
        super().__init__(source)
        self.step: Any = None  # the step of the last snapshot with parameters
        self.last_step: dict[str, int] = {}  # each parameter's iteration of its last step with a grad
        self.cleared: dict[str, bool] = {}  # whether a snapshot since then showed its grad cleared
        self.accumulated: set[str] = set()  # parameters a backward has added to since then
        self.before_backward: dict[tuple[Any, str], Any] = {}  # (backward call, var): its grad's hash

    def feed_snapshot(self, record: dict[str, Any]) -> list[ClearedExample]:
        blocks = [block for block in blocks_of(record) if "Parameter" in block.vtypes]
        if not blocks:
            return []
        step: Any = record.get("step")
        if isinstance(step, int) and isinstance(self.step, int) and step > self.step + 1:
            # Iterations without snapshots (sampled out): what happened to the grads then is unknown.
            self.last_step.clear()
            self.cleared.clear()
            self.accumulated.clear()
        self.step = step
        where = record.get("where")
        if where not in POINTS:
            return []
        out = []
        for block in blocks:
            for i, (vtype, grad) in enumerate(zip(block.vtypes, block.column("grad"), strict=True)):
                if vtype != "Parameter" or grad is ABSENT:
                    continue
                cleared = self._variable(record, where, block.names[i], grad)
                if cleared is not None:
                    out.append(ClearedExample(block.names[i], step, self.source.label, cleared,
                                              param_features(vtype, record.get("phase"), block.attrs(i))))
        return out

    def _variable(self, record: dict[str, Any], where: Any, var: str, grad: Any) -> bool | None:
        """Follow one parameter's grad. When a step receives it and the step's example is due:
        whether it was cleared since the parameter's previous step; None otherwise."""
        if grad is not None and unfingerprinted(grad):
            return None
        if where == BEFORE_BACKWARD:
            self.before_backward[(record.get("call"), var)] = _hash(grad)
        elif where == AFTER_BACKWARD:
            before = self.before_backward.pop((record.get("call"), var), _UNSEEN)
            if before is not _UNSEEN and before != _hash(grad):
                self.accumulated.add(var)
        if value_class(grad) in (NONE, ZERO):
            self.cleared[var] = True
            return None
        step = record.get("step")
        if where != BEFORE_STEP or not isinstance(step, int) or step < 0:
            return None
        # A step receives a grad: it must be cleared before the parameter's next step.
        previous, cleared = self.last_step.get(var), self.cleared.get(var, False)
        accumulated = var in self.accumulated
        self.last_step[var], self.cleared[var] = step, False
        self.accumulated.discard(var)
        return cleared if previous is not None and previous < step and accumulated else None


def _hash(fingerprint: dict[str, Any] | None) -> Any:
    return None if fingerprint is None else fingerprint.get("h")


def key_of(example: ClearedExample) -> str:
    return KEY


def invariant_key(invariant: Invariant) -> str:
    return KEY


def infer(groups: dict[str, list[ClearedExample]], sources: tuple[str, ...]) -> list[Invariant]:
    return scoped_invariants(groups.get(KEY, []), lambda e: e.cleared, relation=RELATION,
                             subject={"event": EVENT, "attribute": "grad", "effect": EFFECT}, description=DESCRIPTION,
                             sources=sources, domain_fields=DOMAIN_FIELDS, min_passing=MIN_PASSING,
                             min_steps=MIN_STEPS)


def outcome(e: ClearedExample) -> bool:
    """What ``violates`` reads of an example besides its features."""
    return e.cleared


def violates(invariant: Invariant, e: ClearedExample) -> bool:
    return not e.cleared and holds_all(invariant.precondition, e.feature_map())


def violation(invariant: Invariant, ex: ClearedExample) -> dict[str, Any]:
    why = (f"{ex.var} reached the step at step {ex.step} with a grad that was never cleared since its previous "
           "step: the step applies the earlier grads again (is zero_grad called every step?)")
    return {"step": ex.step, "api": EVENT, "variable": ex.var, "trace": ex.trace,
            "message": f"{invariant.description}: {why}"}


def needs(req: Needs, inv: Invariant) -> None:
    """The grads wherever they can show cleared, and those the steps receive."""
    for point in POINTS:
        req.need_state(point, req.items_for(point, "grad"))
