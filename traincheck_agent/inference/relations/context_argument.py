"""ContextArgument: a mode flag passed to an API follows the training context, e.g.
``F.dropout`` gets ``training=False`` in eval and ``training=True`` in training.

Only boolean arguments that take both values in the reference are hypothesised: a flag that
never changes says nothing about when it should (and would flag every run that sets it the other
way for good reasons). For each such argument and value, the calls with that value pass and the
precondition must explain them from the context: the training flag of the module whose
forward made the call, the phase, grad mode, autocast. The module's own flag is preferred when
it explains the calls as well as the others do: it is what the framework means (an evaluation
run with grad enabled, or a frozen teacher in train mode under no_grad, keeps that relation).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import (
    FeatureExample,
    deduce,
    holds_all,
    with_condition,
)
from traincheck_agent.trace.reader import TraceFile, find_trace_files
from traincheck_agent.trace.schema import KIND_CALL

RELATION = "ContextArgument"
MIN_PASSING = 5
MIN_STEPS = 2


@dataclass(frozen=True)
class FlagExample(FeatureExample):
    api: str
    argument: str
    value: bool
    step: int
    trace: str
    features: tuple[tuple[str, Any], ...]


# Tie-break order of precondition fields: the most meaningful explanation first.
PRIORITY = ("module_training", "phase", "grad_enabled", "autocast")
_UNKNOWN = "unknown"


def _module_flag(record: dict[str, Any]) -> bool | None:
    """The training flag of the module a call record is the forward of, if it is one."""
    receiver = (record.get("args") or {}).get("self")
    if isinstance(receiver, dict) and isinstance(receiver.get("training"), bool):
        return receiver["training"]
    return None


def _flag_calls(path: Path) -> Iterator[tuple[dict[str, Any], list[tuple[str, bool]], Any]]:
    """(record, its boolean arguments, training flag of the enclosing module) for every call
    with boolean arguments. A call is recorded when it returns, so before its caller: a call
    waits, with its pending descendants, until an enclosing module call resolves it."""
    waiting: dict[Any, list[tuple[dict[str, Any], list[tuple[str, bool]]]]] = defaultdict(list)
    for record in TraceFile(path).records():
        if record.get("kind") != KIND_CALL:
            continue
        flags = [(k, v) for k, v in (record.get("args") or {}).items() if isinstance(v, bool)]
        children = waiting.pop(record.get("id"), [])
        module_flag = _module_flag(record)
        if module_flag is not None:
            for child in children:
                yield (*child, module_flag)
            children = []
        if flags:
            children.append((record, flags))
        if children:
            parent = record.get("parent")
            if parent is None:
                for child in children:
                    yield (*child, _UNKNOWN)
            else:
                waiting[parent].extend(children)
    for children in waiting.values():  # callers never recorded (e.g. the trace was cut)
        for child in children:
            yield (*child, _UNKNOWN)


def collect(paths: Iterable[str | Path]) -> dict[tuple[str, str], list[FlagExample]]:
    groups: dict[tuple[str, str], list[FlagExample]] = defaultdict(list)
    for path in find_trace_files(paths):
        for record, flags, module_training in _flag_calls(path):
            ctx = record.get("ctx") or {}
            features = (("autocast", ctx.get("autocast")), ("grad_enabled", ctx.get("grad", True)),
                        ("module_training", module_training), ("phase", record.get("phase")))
            for name, value in flags:
                groups[(record["api"], name)].append(
                    FlagExample(record["api"], name, value, int(record.get("step", -1)), path.name, features))
    return groups


def infer(groups: dict[tuple[str, str], list[FlagExample]], sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for (api, argument), group in sorted(groups.items()):
        if len({e.value for e in group}) < 2:
            continue
        for value in (False, True):
            passing = [e for e in group if e.value is value]
            if len(passing) < MIN_PASSING or len({e.step for e in passing}) < MIN_STEPS:
                continue
            precondition = deduce([e.feature_map() for e in passing],
                                  [e.feature_map() for e in group if e.value is not value], PRIORITY)
            if not precondition:  # None: not explained by the context; []: cannot happen here
                continue
            invariants.append(Invariant(
                relation=RELATION,
                subject={"api": api, "argument": argument, "value": value},
                precondition=tuple(precondition),
                support={"passing": len(passing), "excluded": len(group) - len(passing),
                         "steps": len({e.step for e in passing})},
                description=with_condition(f"{api} is called with {argument}={value}", precondition),
                sources=sources,
            ))
    return invariants


def check(invariant: Invariant, groups: dict[tuple[str, str], list[FlagExample]]) -> list[FlagExample]:
    subject = invariant.subject
    return [e for e in groups.get((subject["api"], subject["argument"]), [])
            if holds_all(invariant.precondition, e.feature_map()) and e.value is not subject["value"]]


def violation(invariant: Invariant, ex: FlagExample) -> dict[str, Any]:
    return {"step": ex.step, "api": ex.api, "variable": "", "trace": ex.trace,
            "message": f"{invariant.description}: called with {ex.argument}={ex.value} at step {ex.step} "
                       f"(phase {ex.feature_map().get('phase')}, "
                       f"enclosing module training={ex.feature_map().get('module_training')})"}
