"""UpdateMode: the optimizer steps that update a model run while it trains, e.g. "optimizer
steps that update `model` run in phase train".

An evaluation that switches the model to ``eval()`` and never switches it back leaves dropout
off and batch norm frozen for the rest of the run: no error, a loss curve that still falls. The
steps taken in that state are the fault, whatever layer shows it.

One example per optimizer step call and model: the phase of the snapshot taken before the step
(``eval`` when the model is in eval mode or grad is disabled). A value the references showed at
every step (at least three) becomes the invariant. A script that steps under ``no_grad`` on
purpose shows ``eval`` in its references and keeps that; references that disagree give none.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import enough_support
from traincheck_agent.inference.relations import Needs
from traincheck_agent.inference.stream import SnapshotCollector, TraceSource
from traincheck_agent.trace.schema import KIND_SNAPSHOT
from traincheck_agent.trace.snapshot import blocks_of

RELATION = "UpdateMode"
LEARNS_FROM = "optimizer steps with the mode of the model they update recorded"  # what its examples come from: said when it learns nothing
ID_PREFIX = "um"  # of its invariants' ids
SUBJECT_FIELDS = ("event", "model", "phase")  # the subject fields it reads when it checks
TRIAGE_KIND = "context"  # how triage ranks its violations (``relations.TRIAGE_KINDS``)
READS = (KIND_SNAPSHOT,)  # the record kinds its collector reads: state, a snapshot point at a time
EVENT = "optimizer.step"
POINT = f"before:{EVENT}"
MIN_STEPS = 3


class StepMode(NamedTuple):
    model: str  # the owner of the parameters the step updates
    phase: str
    step: int
    trace: str


class Collector(SnapshotCollector):
    def __init__(self, source: TraceSource) -> None:
        super().__init__(source)
        self.seen: set[tuple[Any, str]] = set()  # (step call, model) of the current call
        self.call: Any = None

    def feed_snapshot(self, record: dict[str, Any]) -> list[StepMode]:
        if record.get("where") != POINT:
            return []
        call, step = record.get("call"), record.get("step")
        if call != self.call:
            self.call, self.seen = call, set()
        if not isinstance(step, int) or step < 0:
            return []
        phase, out = str(record.get("phase")), []
        for block in blocks_of(record):
            for vtype, owner in zip(block.vtypes, block.owners, strict=True):
                model = str(owner or "")
                if vtype != "Parameter" or (call, model) in self.seen:
                    continue
                self.seen.add((call, model))
                out.append(StepMode(model, phase, step, self.source.label))
        return out


def key_of(example: StepMode) -> str:
    return example.model


def invariant_key(invariant: Invariant) -> str:
    return invariant.subject["model"]


def infer(groups: dict[str, list[StepMode]], sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for model, group in sorted(groups.items()):
        phases = {e.phase for e in group}
        if len(phases) != 1 or not enough_support([e.step for e in group], MIN_STEPS, MIN_STEPS):
            continue
        phase = phases.pop()
        who = f"`{model}`" if model else "the model"
        invariants.append(Invariant(
            relation=RELATION,
            subject={"event": EVENT, "model": model, "phase": phase},
            precondition=(),
            support={"passing": len(group), "excluded": 0, "steps": len({e.step for e in group})},
            description=f"optimizer steps that update {who} run in phase {phase}",
            sources=sources,
        ))
    return invariants


def violates(invariant: Invariant, e: StepMode) -> bool:
    return e.phase != invariant.subject["phase"]


def violation(invariant: Invariant, ex: StepMode) -> dict[str, Any]:
    why = " (the model in eval mode, or grad disabled)" if ex.phase == "eval" else ""
    return {"step": ex.step, "api": EVENT, "variable": ex.model, "trace": ex.trace,
            "message": f"{invariant.description}: the step at step {ex.step} ran in phase {ex.phase}{why}"}


def needs(req: Needs, inv: Invariant) -> None:
    """The phase of the parameters' snapshot before the step."""
    req.need_state("before:optimizer.step", req.items_for("before:optimizer.step", "data"))
