"""ConsistentOutput (dtype): the dtype of an API's output is fixed by its context, e.g. a
``Linear`` forward inside a bfloat16 autocast region returns bfloat16, outside it float32.

One hypothesis per (API, output dtype seen); calls returning that dtype pass, the others fail,
and the precondition comes from what the call record says before the output exists: the
autocast context, grad mode, phase, the receiver's class and the input's dtype.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from traincheck_agent.inference.call_context import (
    CALL_DOMAIN,
    call_features,
    receiver_name,
    tensor_dtype,
)
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import (
    Clause,
    deduce_scopes,
    domain_of,
    enough_support,
    holds_all,
    ordered,
    with_condition,
)
from traincheck_agent.inference.relations import Needs
from traincheck_agent.inference.stream import Collector as StreamCollector
from traincheck_agent.inference.stream import api_filter
from traincheck_agent.policy.model import DESCRIBE_SUMMARY
from traincheck_agent.trace.schema import KIND_CALL

RELATION = "ConsistentOutput"
LEARNS_FROM = "API calls that return tensors"  # what its examples come from: said when it learns nothing
ID_PREFIX = "co"  # of its invariants' ids
SUBJECT_FIELDS = ("api", "property", "value")  # the subject fields it reads when it checks
TRIAGE_KIND = "state"  # how triage ranks its violations (``relations.TRIAGE_KINDS``)
READS = (KIND_CALL,)  # the record kinds its collector reads
record_filter = api_filter  # checking: each example is one call of the invariant's API
MIN_PASSING = 5
MIN_STEPS = 2


class CallExample(NamedTuple):
    api: str
    dtype: str
    step: int
    trace: str
    features: tuple[tuple[str, Any], ...]
    receiver: str = ""  # the module's name, for module calls

    def feature_map(self) -> dict[str, Any]:  # FeatureExample's: a NamedTuple cannot inherit it
        return dict(self.features)


class Collector(StreamCollector):
    def feed(self, record: dict[str, Any]) -> list[CallExample]:
        if record.get("kind") != KIND_CALL or record.get("exc"):
            return []
        dtype = tensor_dtype(record.get("ret"))
        if dtype is None:
            return []
        api = record["api"]
        return [CallExample(api, dtype, int(record.get("step", -1)), self.source.label, call_features(record),
                            receiver_name(record))]


def key_of(example: CallExample) -> str:
    return example.api


def invariant_key(invariant: Invariant) -> str:
    return invariant.subject["api"]


def _scoped_to_input_dtype(precondition: list[Clause], passing: list[dict[str, Any]]) -> list[Clause]:
    """An output dtype learned from float32 inputs says nothing about bfloat16 inputs (a model
    cast with ``.half()``, say): scope the invariant to the input dtype it was seen with."""
    dtypes = {f.get("input.dtype") for f in passing}
    if len(dtypes) != 1 or None in dtypes or any(c.field == "input.dtype" for c in precondition):
        return precondition
    return ordered([*precondition, Clause("input.dtype", dtypes.pop())])


def infer(groups: dict[str, list[CallExample]], sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for api, group in sorted(groups.items()):
        features = [e.feature_map() for e in group]
        for dtype in sorted({e.dtype for e in group}):
            passing_idx = [i for i, e in enumerate(group) if e.dtype == dtype]
            if len(passing_idx) < MIN_PASSING or len({group[i].step for i in passing_idx}) < MIN_STEPS:
                continue
            chosen = set(passing_idx)
            for scope in deduce_scopes([features[i] for i in passing_idx],
                                       [features[i] for i in range(len(group)) if i not in chosen],
                                       [group[i].trace for i in passing_idx]):
                kept = [passing_idx[i] for i in scope.passing]
                if not enough_support([group[i].step for i in kept], MIN_PASSING, MIN_STEPS):
                    continue
                kept_features = [features[i] for i in kept]
                precondition = _scoped_to_input_dtype(scope.precondition, kept_features)
                invariants.append(Invariant(
                    relation=RELATION,
                    subject={"api": api, "property": "dtype", "value": dtype},
                    precondition=tuple(precondition),
                    support={"passing": len(kept), "excluded": len(group) - len(kept),
                             "steps": len({group[i].step for i in kept})},
                    description=with_condition(f"{api} returns {dtype}", precondition),
                    sources=sources,
                    domain=domain_of(kept_features, CALL_DOMAIN),
                ))
    return invariants


def violates(invariant: Invariant, e: CallExample) -> bool:
    return e.dtype != invariant.subject["value"] and holds_all(invariant.precondition, e.feature_map())


def violation(invariant: Invariant, ex: CallExample) -> dict[str, Any]:
    who = f"{ex.receiver} ({ex.api})" if ex.receiver else ex.api
    return {"step": ex.step, "api": ex.api, "variable": ex.receiver, "trace": ex.trace,
            "message": f"{invariant.description}: {who} returned {ex.dtype} at step {ex.step}"}


def needs(req: Needs, inv: Invariant) -> None:
    req.need_call(inv.subject["api"], DESCRIBE_SUMMARY, DESCRIBE_SUMMARY)
