"""APISequence: the order of API calls in a training loop.

Two forms, both about framework semantics rather than the order of incidental helpers:

* ``covers``: between two consecutive optimizer steps the training loop calls API A, e.g.
  ``zero_grad`` (or a forward, a backward) in every iteration. Only outermost calls count (the
  ones the training loop makes itself); the interval of step ``s`` holds the outermost calls
  whose ``step`` field is ``s``, and it ends with the call that advanced the step (the last one
  recorded with ``s``: the clock moves when that call returns). The first interval of a run is
  not an example: before the first step nothing had to be undone.
* ``leads``: the first call of an API with a boolean flag set one way precedes its first call
  with the flag set the other way, per receiver module, e.g. ``compute_weight(module,
  do_power_iteration=True)`` before ``do_power_iteration=False`` (spectral norm evaluated before
  its power iteration ever ran), or ``F.batch_norm(training=True)`` before ``training=False``
  (running statistics used before they were ever updated).

A hypothesis is emitted only when every example in every reference holds; there is no
precondition to deduce (the first interval and the receiver already scope the examples).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.trace.reader import TraceFile, find_trace_files
from traincheck_agent.trace.schema import KIND_CALL

RELATION = "APISequence"
MIN_INTERVALS = 5
MIN_LEADS = 2


@dataclass(frozen=True)
class Interval:
    """The outermost calls between the step call of ``step - 1`` and that of ``step``."""

    trace: str
    step: int
    step_api: str
    apis: frozenset[str]


@dataclass(frozen=True)
class FirstCalls:
    """When a flagged API was first called with each value of the flag, for one receiver."""

    trace: str
    api: str
    flag: str
    receiver: str
    first: dict[bool, tuple[int, int]]  # value -> (start time ns, step)


@dataclass
class SequenceExamples:
    intervals: list[Interval] = field(default_factory=list)
    first_calls: list[FirstCalls] = field(default_factory=list)


def _receiver(args: dict[str, Any]) -> str:
    """The name of the module a call works on (``self`` or a module argument), or ""."""
    for desc in args.values():
        if isinstance(desc, dict) and isinstance(desc.get("training"), bool) and "name" in desc:
            return str(desc["name"])
    return ""


def _intervals(trace: str, by_step: dict[int, set[str]], last_api: dict[int, str]) -> list[Interval]:
    steps = sorted(s for s in by_step if s >= 0)
    # The interval of step s is complete when a later step was seen: its last call advanced it.
    complete = [s for s in steps if s + 1 in by_step]
    return [Interval(trace, s, last_api[s], frozenset(by_step[s])) for s in complete]


def collect(paths: Iterable[str | Path]) -> SequenceExamples:
    out = SequenceExamples()
    for path in find_trace_files(paths):
        by_step: dict[int, set[str]] = defaultdict(set)
        last_api: dict[int, str] = {}
        first: dict[tuple[str, str, str], dict[bool, tuple[int, int]]] = defaultdict(dict)
        for record in TraceFile(path).records():
            if record.get("kind") != KIND_CALL:
                continue
            api, step = str(record.get("api")), int(record.get("step", -1))
            args = record.get("args") or {}
            t0 = int(record.get("t0_ns", 0))
            for name, value in args.items():
                if isinstance(value, bool):
                    seen = first[(api, name, _receiver(args))]
                    if value not in seen or t0 < seen[value][0]:
                        seen[value] = (t0, step)
            if record.get("parent") is None:
                by_step[step].add(api)
                last_api[step] = api
        out.intervals += _intervals(path.name, by_step, last_api)
        out.first_calls += [FirstCalls(path.name, api, flag, receiver, values)
                            for (api, flag, receiver), values in first.items()]
    return out


def _later_intervals(intervals: list[Interval]) -> list[Interval]:
    """Every interval but the first of its trace."""
    first_step: dict[str, int] = {}
    for interval in intervals:
        first_step[interval.trace] = min(first_step.get(interval.trace, interval.step), interval.step)
    return [i for i in intervals if i.step != first_step[i.trace]]


def _infer_covers(examples: SequenceExamples, sources: tuple[str, ...]) -> list[Invariant]:
    by_step_api: dict[str, list[Interval]] = defaultdict(list)
    for interval in _later_intervals(examples.intervals):
        by_step_api[interval.step_api].append(interval)
    invariants = []
    for step_api, intervals in sorted(by_step_api.items()):
        if len(intervals) < MIN_INTERVALS:
            continue
        common = frozenset.intersection(*(i.apis for i in intervals)) - {step_api}
        for api in sorted(common):
            invariants.append(Invariant(
                relation=RELATION,
                subject={"form": "covers", "api": api, "between": step_api},
                precondition=(),
                support={"passing": len(intervals), "traces": len({i.trace for i in intervals})},
                description=f"{api} is called between two consecutive {step_api} calls",
                sources=sources,
            ))
    return invariants


def _infer_leads(examples: SequenceExamples, sources: tuple[str, ...]) -> list[Invariant]:
    groups: dict[tuple[str, str], list[FirstCalls]] = defaultdict(list)
    for fc in examples.first_calls:
        groups[(fc.api, fc.flag)].append(fc)
    invariants = []
    for (api, flag), calls in sorted(groups.items()):
        for value in (True, False):
            relevant = [fc for fc in calls if (not value) in fc.first]
            if len(relevant) < MIN_LEADS:
                continue
            if not all(value in fc.first and fc.first[value][0] < fc.first[not value][0] for fc in relevant):
                continue
            invariants.append(Invariant(
                relation=RELATION,
                subject={"form": "leads", "api": api, "flag": flag, "first": value},
                precondition=(),
                support={"passing": len(relevant), "traces": len({fc.trace for fc in relevant})},
                description=f"{api} is first called with {flag}={value} before any call with {flag}={not value}",
                sources=sources,
            ))
    return invariants


def infer(examples: SequenceExamples, sources: tuple[str, ...]) -> list[Invariant]:
    return _infer_covers(examples, sources) + _infer_leads(examples, sources)


def check(invariant: Invariant, examples: SequenceExamples) -> list[Interval | FirstCalls]:
    subject = invariant.subject
    if subject.get("form") == "covers":
        return [i for i in _later_intervals(examples.intervals)
                if i.step_api == subject["between"] and subject["api"] not in i.apis]
    value = subject["first"]
    return [fc for fc in examples.first_calls
            if fc.api == subject["api"] and fc.flag == subject["flag"] and (not value) in fc.first
            and not (value in fc.first and fc.first[value][0] < fc.first[not value][0])]


def violation(invariant: Invariant, ex: Interval | FirstCalls) -> dict[str, Any]:
    if isinstance(ex, Interval):
        return {"step": ex.step, "api": invariant.subject["api"], "variable": "", "trace": ex.trace,
                "message": f"{invariant.description}: no {invariant.subject['api']} call before "
                           f"the {ex.step_api} call of step {ex.step}"}
    value = invariant.subject["first"]
    step = ex.first[not value][1]
    where = f" on {ex.receiver}" if ex.receiver else ""
    return {"step": step, "api": ex.api, "variable": ex.receiver, "trace": ex.trace,
            "message": f"{invariant.description}: called with {ex.flag}={not value}{where} at step {step} "
                       f"before any call with {ex.flag}={value}"}
