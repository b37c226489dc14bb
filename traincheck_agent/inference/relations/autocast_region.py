"""AutocastRegion: in a step that runs under autocast, each module of the model runs under the
autocast state its references showed for it, e.g. ``blocks.1.fc_in`` under ``cpu:bfloat16``.

Autocast regions are written into the code (``with torch.autocast(...)`` around the forward, an
``enabled=False`` block around a numerically delicate part), so they do not change from step to
step. A module that slips out of the region (a helper that disables autocast around it, a call
placed after the ``with`` block closes) computes in float32 where the references computed in
bfloat16, with no error: its outputs, memory and speed change silently.

The example is one module call; its context is what the step shows: ``step_autocast``, the
autocast states any module call of the same step and phase ran under (so a module is judged
only in a step that uses autocast at all, and a run with autocast switched off as a whole is
outside the domain, not a violation). A step's examples are complete when the next step
starts. Modules are told apart by their names in the model; a name two pipelines share with
different regions is scoped apart by the usual preconditions (receiver class, grad mode, phase)
or dropped.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from traincheck_agent.inference.call_context import context_features, receiver
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import (
    deduce_scopes,
    domain_of,
    enough_support,
    holds_all,
    with_condition,
)
from traincheck_agent.inference.relations import Needs
from traincheck_agent.inference.stream import Collector as StreamCollector
from traincheck_agent.policy.model import DESCRIBE_NONE, DESCRIBE_SUMMARY
from traincheck_agent.trace.schema import KIND_CALL

RELATION = "AutocastRegion"
LEARNS_FROM = "module calls in steps that run under autocast"  # what its examples come from: said when it learns nothing
ID_PREFIX = "ar"  # of its invariants' ids
SUBJECT_FIELDS = ("api", "module", "autocast")  # the subject fields it reads when it checks
TRIAGE_KIND = "context"  # how triage ranks its violations (``relations.TRIAGE_KINDS``)
SHARED_SUBJECT = "autocast region"  # one subject in triage, whatever API a violation names
READS = (KIND_CALL,)  # the record kinds its collector reads
MIN_PASSING = 3
MIN_STEPS = 3
OFF = "off"  # a module call with autocast disabled
PRIORITY = ("phase", "grad_enabled", "self.type")
DOMAIN_FIELDS = ("phase", "grad_enabled", "step_autocast")


class ModuleCall(NamedTuple):
    api: str
    module: str  # the module's name in the model
    autocast: str  # its autocast state, or OFF
    step: int
    trace: str
    features: tuple[tuple[str, Any], ...]

    def feature_map(self) -> dict[str, Any]:  # FeatureExample's: a NamedTuple cannot inherit it
        return dict(self.features)


class Collector(StreamCollector):
    """Module calls of the current step and phase, held until the step (or phase) ends and its
    autocast states are all known."""

    def __init__(self, source: Any) -> None:
        super().__init__(source)
        self.held: list[tuple[str, str, str, int, dict[str, Any]]] = []
        self.states: set[str] = set()
        self.current: tuple[int, Any] | None = None

    def feed(self, record: dict[str, Any]) -> list[ModuleCall]:
        if record.get("kind") != KIND_CALL:
            return []
        desc = receiver(record)
        name = desc.get("name") if desc is not None else None
        if desc is None or not isinstance(name, str) or not name or "training" not in desc:
            return []  # not a module call
        step = int(record.get("step", -1))
        context = context_features(record)
        out = self._flush() if (step, context["phase"]) != self.current else []
        self.current = (step, context["phase"])
        autocast = context.pop("autocast") or OFF
        if autocast != OFF:
            self.states.add(autocast)
        context.pop("accumulating", None)
        context["self.type"] = desc.get("t")
        if self.wanted is None or (record["api"], name) in self.wanted:
            self.held.append((record["api"], name, autocast, step, context))
        return out

    def finish(self) -> list[ModuleCall]:
        return self._flush()

    def _flush(self) -> list[ModuleCall]:
        held, states = self.held, self.states
        self.held, self.states = [], set()
        if not states:
            return []  # a step without autocast: nothing to judge
        step_autocast = "+".join(sorted(states))
        return [ModuleCall(api, name, autocast, step, self.source.label,
                           tuple(sorted({**context, "step_autocast": step_autocast}.items())))
                for api, name, autocast, step, context in held]


def key_of(example: ModuleCall) -> tuple[str, str]:
    return example.api, example.module


def invariant_key(invariant: Invariant) -> tuple[str, str]:
    return invariant.subject["api"], invariant.subject["module"]


def infer(groups: dict[tuple[str, str], list[ModuleCall]], sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for (api, module), group in sorted(groups.items()):
        for state in sorted({e.autocast for e in group}):
            passing = [e for e in group if e.autocast == state]
            if not enough_support([e.step for e in passing], MIN_PASSING, MIN_STEPS):
                continue
            features = [e.feature_map() for e in passing]
            for scope in deduce_scopes(features, [e.feature_map() for e in group if e.autocast != state],
                                       [e.trace for e in passing], PRIORITY):
                kept = [passing[i] for i in scope.passing]
                if not enough_support([e.step for e in kept], MIN_PASSING, MIN_STEPS):
                    continue
                precondition = scope.precondition
                where = "with autocast off" if state == OFF else f"under autocast {state}"
                invariants.append(Invariant(
                    relation=RELATION,
                    subject={"api": api, "module": module, "autocast": state},
                    precondition=tuple(precondition),
                    support={"passing": len(kept), "excluded": len(group) - len(kept),
                             "steps": len({e.step for e in kept})},
                    description=with_condition(f"{module} ({api}) runs {where} in steps that use autocast",
                                               precondition),
                    sources=sources,
                    domain=domain_of([features[i] for i in scope.passing], DOMAIN_FIELDS),
                ))
    return invariants


def violates(invariant: Invariant, e: ModuleCall) -> bool:
    return e.autocast != invariant.subject["autocast"] and holds_all(invariant.precondition, e.feature_map())


def violation(invariant: Invariant, ex: ModuleCall) -> dict[str, Any]:
    where = "with autocast off" if ex.autocast == OFF else f"under autocast {ex.autocast}"
    return {"step": ex.step, "api": ex.api, "variable": ex.module, "trace": ex.trace,
            "message": f"{invariant.description}: it ran {where} at step {ex.step} "
                       f"(the step's other modules ran under {ex.feature_map().get('step_autocast')})"}


def needs(req: Needs, inv: Invariant) -> None:
    """Every module call: a step's autocast states come from all of them, not the watched one's."""
    req.module_calls = (DESCRIBE_SUMMARY, DESCRIBE_NONE)
