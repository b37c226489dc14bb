"""Threshold: a numeric property of an API's output is bounded by one of its arguments, e.g.
``generate(model, prompt, max_new_tokens=k)`` returns at most ``k`` new tokens
(``ret.shape[1] - prompt.shape[1] <= max_new_tokens``), or ``ret.shape[1] <= max_length``.

Every call record with a numeric argument and a numeric output property is an example.
Arguments: top-level ints and floats (keyword ones included; defaults are not recorded, so a
call that leaves the argument out is not an example), never identity-like names (ids, seeds,
ranks, times, dims) or id-sized values. Properties: a returned scalar, the dims of a returned
tensor (or of the tensors in a returned tuple, and its length), and the growth of a returned
tensor over a tensor argument of the same rank, dim by dim.

A hypothesis ``property <= argument`` (or ``<`` for integers) needs evidence that the argument
is the limit, not an accident of ranges: at least ``MIN_CALLS`` calls, the argument taking at
least ``MIN_BOUND_VALUES`` values, and the bound *reached* (equality, or ``argument - 1`` for
``<``) at at least ``MIN_ATTAINED_VALUES`` different argument values. A property that is a fixed
offset of an input dim (the output batch size copies the input's) is decided by the input and
never hypothesised. Of the arguments that bound a property, only the tightest is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from traincheck_agent.inference.call_context import context_features, receiver
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import (
    Clause,
    FeatureExample,
    deduce,
    holds_all,
    with_condition,
)
from traincheck_agent.inference.relations import Needs
from traincheck_agent.inference.stream import Collector as StreamCollector
from traincheck_agent.policy.model import DESCRIBE_SUMMARY
from traincheck_agent.trace.schema import KIND_CALL

RELATION = "Threshold"
LEARNS_FROM = "API calls with a numeric argument and a tensor output"  # what its examples come from: said when it learns nothing
ID_PREFIX = "th"  # of its invariants' ids
SUBJECT_FIELDS = ("api", "property", "op", "argument")  # the subject fields it reads when it checks
TRIAGE_KIND = "ordering"  # how triage ranks its violations (``relations.TRIAGE_KINDS``)
READS = (KIND_CALL,)  # the record kinds its collector reads
MIN_CALLS = 5
MIN_BOUND_VALUES = 3
MIN_ATTAINED_VALUES = 2
MAX_MAGNITUDE = 10**12  # larger "numbers" are object ids, addresses or timestamps
_TENSOR_TYPES = ("Tensor", "Parameter")
# Name parts that mark an argument as an identity, a position or a time rather than a limit.
_IDENTITY_PARTS = frozenset({
    "id", "ids", "pid", "oid", "uid", "tid", "seed", "rank", "step", "epoch", "iteration", "time",
    "timestamp", "timeout", "ns", "dim", "dims", "axis", "device", "generator", "index", "idx",
})

Number = int | float


@dataclass(frozen=True)
class CallExample(FeatureExample):
    api: str
    step: int
    trace: str
    properties: tuple[tuple[str, Number], ...]  # numeric properties of the output
    bounds: tuple[tuple[str, Number], ...]  # numeric arguments
    inputs: tuple[tuple[str, int], ...]  # dims of the tensor arguments
    features: tuple[tuple[str, Any], ...]

    def property(self, name: str) -> Number | None:
        return dict(self.properties).get(name)

    def bound(self, name: str) -> Number | None:
        return dict(self.bounds).get(name)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < MAX_MAGNITUDE


def _is_tensor(desc: Any) -> bool:
    return isinstance(desc, dict) and desc.get("t") in _TENSOR_TYPES and isinstance(desc.get("shape"), list)


def _identity_like(name: str) -> bool:
    parts = re.split(r"[_\W]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower())
    return any(p in _IDENTITY_PARTS for p in parts)


def _label(name: str) -> str:
    """Positional arguments whose name the agent could not read are recorded as "0", "1", ..."""
    return f"args[{name}]" if name.isdigit() else name


def _output_properties(ret: Any, args: dict[str, Any]) -> dict[str, Number]:
    out: dict[str, Number] = {}
    if _number(ret):
        out["ret"] = ret
    elif _is_tensor(ret):
        shape = ret["shape"]
        for i, size in enumerate(shape):
            out[f"ret.shape[{i}]"] = size
        for name, desc in args.items():
            if _is_tensor(desc) and len(desc["shape"]) == len(shape):
                for i, (size, base) in enumerate(zip(shape, desc["shape"], strict=True)):
                    out[f"ret.shape[{i}] - {_label(name)}.shape[{i}]"] = size - base
    elif isinstance(ret, dict) and ret.get("t") in ("list", "tuple") and isinstance(ret.get("len"), int):
        out["len(ret)"] = ret["len"]
        for k, item in enumerate(ret.get("items") or []):
            if _is_tensor(item):
                for i, size in enumerate(item["shape"]):
                    out[f"ret[{k}].shape[{i}]"] = size
    return out


def _features(record: dict[str, Any], args: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    out = context_features(record)
    self_desc = receiver(record)
    if self_desc is not None:
        out["self.type"] = self_desc.get("t")
    for name, value in args.items():
        if isinstance(value, bool):
            out[f"arg.{_label(name)}"] = value
    return tuple(sorted(out.items()))


def _example(record: dict[str, Any], trace: str) -> CallExample | None:
    args = record.get("args") or {}
    bounds = {_label(n): v for n, v in args.items() if _number(v) and not _identity_like(n)}
    if not bounds:
        return None
    properties = _output_properties(record.get("ret"), args)
    if not properties:
        return None
    inputs = {f"{_label(n)}.shape[{i}]": size for n, d in args.items() if _is_tensor(d)
              for i, size in enumerate(d["shape"])}
    return CallExample(record["api"], int(record.get("step", -1)), trace, tuple(sorted(properties.items())),
                       tuple(sorted(bounds.items())), tuple(sorted(inputs.items())), _features(record, args))


class Collector(StreamCollector):
    """Calls with both a numeric argument and a numeric output property."""

    def feed(self, record: dict[str, Any]) -> list[CallExample]:
        if record.get("kind") != KIND_CALL or record.get("exc"):
            return []
        example = _example(record, self.source.label)
        return [] if example is None else [example]


def key_of(example: CallExample) -> str:
    return example.api


def invariant_key(invariant: Invariant) -> str:
    return invariant.subject["api"]


def _holds(op: str, value: Number, bound: Number) -> bool:
    return value <= bound if op == "<=" else value < bound


def _reached(op: str, value: Number, bound: Number) -> bool:
    return value == bound if op == "<=" else value == bound - 1


def _decided_by_input(prop: str, group: list[CallExample]) -> bool:
    """True when ``prop`` is a constant, or a fixed offset of one input dim in every call."""
    seen = [(v, dict(e.inputs)) for e in group if (v := e.property(prop)) is not None]
    if len({v for v, _ in seen}) < 2:
        return True
    names = set.intersection(*(set(inputs) for _, inputs in seen))
    return any(len({v - inputs[n] for v, inputs in seen}) == 1 for n in names)


@dataclass(frozen=True)
class _Hypothesis:
    prop: str
    op: str
    arg: str
    precondition: tuple[Clause, ...]
    passing: tuple[CallExample, ...]
    excluded: int
    attained: int
    attained_values: int
    slack: float


def _hypothesis(prop: str, arg: str, op: str, examples: list[CallExample]) -> _Hypothesis | None:
    # ``examples`` have both values (``_best_bound``).
    pairs = [(e, v, b) for e in examples if (v := e.property(prop)) is not None and (b := e.bound(arg)) is not None]
    if op == "<" and not all(isinstance(v, int) and isinstance(b, int) for _, v, b in pairs):
        return None
    passing = [(e, v, b) for e, v, b in pairs if _holds(op, v, b)]
    failing = [e for e, v, b in pairs if not _holds(op, v, b)]
    precondition = deduce([e.feature_map() for e, _, _ in passing], [e.feature_map() for e in failing])
    if precondition is None or len(passing) < MIN_CALLS:
        return None
    reached = [b for _, v, b in passing if _reached(op, v, b)]
    if len(set(reached)) < MIN_ATTAINED_VALUES:
        return None
    slack = sum(b - v for _, v, b in passing) / len(passing)
    return _Hypothesis(prop, op, arg, tuple(precondition), tuple(e for e, _, _ in passing),
                       len(failing), len(reached), len(set(reached)), slack)


def _best_bound(prop: str, group: list[CallExample], arguments: list[str]) -> _Hypothesis | None:
    found: list[_Hypothesis] = []
    for arg in arguments:
        examples = [e for e in group if e.property(prop) is not None and e.bound(arg) is not None]
        if len(examples) < MIN_CALLS or len({e.bound(arg) for e in examples}) < MIN_BOUND_VALUES:
            continue
        for op in ("<=", "<"):
            hypothesis = _hypothesis(prop, arg, op, examples)
            if hypothesis is not None:
                found.append(hypothesis)
                break
    # The tightest bound: least slack on average, then the most often reached.
    if not found:
        return None
    return min(found, key=lambda h: (h.slack, -h.attained, h.arg))


def describe(api: str, prop: str, op: str, arg: str) -> str:
    return f"{api} keeps {prop} {op} its argument {arg}"


def infer(groups: dict[str, list[CallExample]], sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for api, group in sorted(groups.items()):
        if len(group) < MIN_CALLS:
            continue
        arguments = sorted({name for e in group for name, _ in e.bounds})
        for prop in sorted({name for e in group for name, _ in e.properties}):
            if _decided_by_input(prop, group):
                continue
            h = _best_bound(prop, group, arguments)
            if h is None:
                continue
            invariants.append(Invariant(
                relation=RELATION,
                subject={"api": api, "property": h.prop, "op": h.op, "argument": h.arg},
                precondition=h.precondition,
                support={"passing": len(h.passing), "excluded": h.excluded, "attained": h.attained,
                         "bound_values": len({e.bound(h.arg) for e in h.passing}),
                         "steps": len({e.step for e in h.passing})},
                description=with_condition(describe(api, h.prop, h.op, h.arg), h.precondition),
                sources=sources,
            ))
    return invariants


def violates(invariant: Invariant, e: CallExample) -> bool:
    subject = invariant.subject
    value, bound = e.property(subject["property"]), e.bound(subject["argument"])
    if value is None or bound is None or not holds_all(invariant.precondition, e.feature_map()):
        return False
    return not _holds(subject["op"], value, bound)


def violation(invariant: Invariant, ex: CallExample) -> dict[str, Any]:
    subject = invariant.subject
    prop, arg = subject["property"], subject["argument"]
    return {"step": ex.step, "api": ex.api, "variable": "", "trace": ex.trace,
            "message": f"{invariant.description}: got {prop} = {ex.property(prop)} with "
                       f"{arg} = {ex.bound(arg)} at step {ex.step}"}


def needs(req: Needs, inv: Invariant) -> None:
    req.need_call(inv.subject["api"], DESCRIBE_SUMMARY, DESCRIBE_SUMMARY)
