"""ContextArgument: a mode flag passed to an API follows the training context, e.g.
``F.dropout`` gets ``training=False`` in eval and ``training=True`` in training.

Only boolean arguments that take both values in the reference are hypothesised: a flag that
never changes says nothing about when it should (and would flag every run that sets it the other
way for good reasons). For each such argument and value, the calls with that value pass and the
precondition must explain them from the context: the training flag of the module whose
forward made the call, the phase, grad mode, autocast. The module's own flag is preferred when
it explains the calls as well as the others do: it is what the framework means (an evaluation
run with grad enabled, or a frozen teacher in train mode under no_grad, keeps that relation).
The enclosing module is the nearest module *forward*: ``Module.eval`` calling ``train(False)``
does not make ``train``'s flag follow anything.

The flags of the calls that set a mode (``Module.train(mode)``, ``requires_grad_``) are not
hypothesised: they change the context rather than follow it, and scripts legitimately call
``model.train()`` in whatever mode the model already is.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

from traincheck_agent.inference.call_context import MODE_SETTERS, context_features, module_training
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
from traincheck_agent.inference.stream import TraceSource
from traincheck_agent.policy.model import DESCRIBE_NONE, DESCRIBE_SUMMARY
from traincheck_agent.trace.schema import KIND_CALL

RELATION = "ContextArgument"
LEARNS_FROM = "mode flags (training=, ...) passed to APIs in both phases"  # what its examples come from: said when it learns nothing
ID_PREFIX = "ca"  # of its invariants' ids
SUBJECT_FIELDS = ("api", "argument", "value")  # the subject fields it reads when it checks
TRIAGE_KIND = "ordering"  # how triage ranks its violations (``relations.TRIAGE_KINDS``)
READS = (KIND_CALL,)  # the record kinds its collector reads
MIN_PASSING = 5
MIN_STEPS = 2


class FlagExample(NamedTuple):
    api: str
    argument: str
    value: bool
    step: int
    trace: str
    features: tuple[tuple[str, Any], ...]

    def feature_map(self) -> dict[str, Any]:  # FeatureExample's: a NamedTuple cannot inherit it
        return dict(self.features)


# Tie-break order of precondition fields: the most meaningful explanation first.
PRIORITY = ("module_training", "phase", "grad_enabled", "autocast")
_UNKNOWN = "unknown"


Waiting = list[tuple[dict[str, Any], list[tuple[str, bool]]]]


class Collector(StreamCollector):
    """Calls with boolean arguments, each with the training flag of its enclosing module. A
    call is recorded when it returns, so before its caller: it waits, with its pending
    descendants, until an enclosing module call resolves it."""

    def __init__(self, source: TraceSource) -> None:
        super().__init__(source)
        self.waiting: dict[Any, Waiting] = defaultdict(list)

    def feed(self, record: dict[str, Any]) -> list[FlagExample]:
        if record.get("kind") != KIND_CALL:
            return []
        wanted, api = self.wanted, record.get("api")
        flags = [] if api in MODE_SETTERS else [
            (k, v) for k, v in (record.get("args") or {}).items()
            if isinstance(v, bool) and (wanted is None or (api, k) in wanted)]
        children = self.waiting.pop(record.get("id"), [])
        out: list[FlagExample] = []
        module_flag = module_training(record) if str(api).endswith(".forward") else None
        if module_flag is not None:
            out += self._examples(children, module_flag)
            children = []
        if flags:
            children.append((record, flags))
        if children:
            parent = record.get("parent")
            if parent is None:
                out += self._examples(children, _UNKNOWN)
            else:
                self.waiting[parent].extend(children)
        return out

    def finish(self) -> list[FlagExample]:
        out = []  # callers never recorded (e.g. the trace was cut)
        for children in self.waiting.values():
            out += self._examples(children, _UNKNOWN)
        return out

    def _examples(self, calls: Waiting, enclosing: Any) -> list[FlagExample]:
        out = []
        for record, flags in calls:
            features = tuple(sorted({**context_features(record), "module_training": enclosing}.items()))
            out += [FlagExample(record["api"], name, value, int(record.get("step", -1)), self.source.label, features)
                    for name, value in flags]
        return out


def key_of(example: FlagExample) -> tuple[str, str]:
    return example.api, example.argument


def invariant_key(invariant: Invariant) -> tuple[str, str]:
    return invariant.subject["api"], invariant.subject["argument"]


def infer(groups: dict[tuple[str, str], list[FlagExample]], sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for (api, argument), group in sorted(groups.items()):
        if len({e.value for e in group}) < 2:
            continue
        for value in (False, True):
            passing = [e for e in group if e.value is value]
            if len(passing) < MIN_PASSING or len({e.step for e in passing}) < MIN_STEPS:
                continue
            features = [e.feature_map() for e in passing]
            for scope in deduce_scopes(features, [e.feature_map() for e in group if e.value is not value],
                                       [e.trace for e in passing], PRIORITY):
                kept = [passing[i] for i in scope.passing]
                precondition = scope.precondition
                if not precondition or not enough_support([e.step for e in kept], MIN_PASSING, MIN_STEPS):
                    continue  # []: not explained by the context (cannot happen: both values occur)
                invariants.append(Invariant(
                    relation=RELATION,
                    subject={"api": api, "argument": argument, "value": value},
                    precondition=tuple(precondition),
                    support={"passing": len(kept), "excluded": len(group) - len(kept),
                             "steps": len({e.step for e in kept})},
                    description=with_condition(f"{api} is called with {argument}={value}", precondition),
                    sources=sources,
                    domain=domain_of([features[i] for i in scope.passing], PRIORITY),
                ))
    return invariants


def violates(invariant: Invariant, e: FlagExample) -> bool:
    return e.value is not invariant.subject["value"] and holds_all(invariant.precondition, e.feature_map())


def violation(invariant: Invariant, ex: FlagExample) -> dict[str, Any]:
    return {"step": ex.step, "api": ex.api, "variable": "", "trace": ex.trace,
            "message": f"{invariant.description}: called with {ex.argument}={ex.value} at step {ex.step} "
                       f"(phase {ex.feature_map().get('phase')}, "
                       f"enclosing module training={ex.feature_map().get('module_training')})"}


def needs(req: Needs, inv: Invariant) -> None:
    """Its API's calls; the flag is judged against the training flag of the enclosing module, so
    every module call is recorded with its receiver, and the nearest one is always found."""
    req.need_call(inv.subject["api"], DESCRIBE_SUMMARY, DESCRIBE_NONE)
    req.module_calls = (DESCRIBE_SUMMARY, DESCRIBE_NONE)
