"""ConsistentInputOutput: an API's output keeps a dimension of its input, e.g. every layer
preserves the batch dimension (``ret.shape[0] == input.shape[0]``), a sequence model the
sequence length.

The input is the call's first tensor argument (``self`` excluded); the output its returned
tensor. One hypothesis per (API, dim) that both have; it is emitted when the sizes were equal
in every call of every reference and the input took at least two sizes in that dim: a size that
never varied is a constant of the model (a feature width), not something the call preserves.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from traincheck_agent.inference.call_context import CALL_DOMAIN, call_features
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
from traincheck_agent.inference.stream import api_filter
from traincheck_agent.policy.model import DESCRIBE_SUMMARY
from traincheck_agent.trace.schema import KIND_CALL

RELATION = "ConsistentInputOutput"
LEARNS_FROM = "API calls with tensor inputs and outputs"  # what its examples come from: said when it learns nothing
ID_PREFIX = "io"  # of its invariants' ids
SUBJECT_FIELDS = ("api", "dim")  # the subject fields it reads when it checks
TRIAGE_KIND = "state"  # how triage ranks its violations (``relations.TRIAGE_KINDS``)
READS = (KIND_CALL,)  # the record kinds its collector reads
record_filter = api_filter  # checking: each example is one call of the invariant's API
MIN_PASSING = 5
MIN_STEPS = 2
MIN_SIZES = 2
_TENSORS = ("Tensor", "Parameter")


class ShapeExample(NamedTuple):
    api: str
    argument: str
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    step: int
    trace: str
    features: tuple[tuple[str, Any], ...]

    def keeps(self, dim: int) -> bool:
        return self.input_shape[dim] == self.output_shape[dim]

    def feature_map(self) -> dict[str, Any]:  # FeatureExample's: a NamedTuple cannot inherit it
        return dict(self.features)


def _shape(desc: Any) -> tuple[int, ...] | None:
    if isinstance(desc, dict) and desc.get("t") in _TENSORS and isinstance(desc.get("shape"), list):
        return tuple(desc["shape"])
    return None


class Collector(StreamCollector):
    def feed(self, record: dict[str, Any]) -> list[ShapeExample]:
        if record.get("kind") != KIND_CALL or record.get("exc"):
            return []
        out = _shape(record.get("ret"))
        if out is None:
            return []
        found = next(((n, s) for n, d in (record.get("args") or {}).items()
                      if n != "self" and (s := _shape(d)) is not None), None)
        if found is None:
            return []
        return [ShapeExample(str(record["api"]), found[0], found[1], out, int(record.get("step", -1)),
                             self.source.label, call_features(record))]


def key_of(example: ShapeExample) -> str:
    return example.api


def invariant_key(invariant: Invariant) -> str:
    return invariant.subject["api"]


def infer(groups: dict[str, list[ShapeExample]], sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for api, group in sorted(groups.items()):
        ranks = min(min(len(e.input_shape), len(e.output_shape)) for e in group)
        for dim in range(ranks):
            passing = [e for e in group if e.keeps(dim)]
            if (len(passing) < MIN_PASSING or len({e.step for e in passing}) < MIN_STEPS
                    or len({e.input_shape[dim] for e in passing}) < MIN_SIZES):
                continue
            features = [e.feature_map() for e in passing]
            for scope in deduce_scopes(features, [e.feature_map() for e in group if not e.keeps(dim)],
                                       [e.trace for e in passing]):
                kept = [passing[i] for i in scope.passing]
                if (not enough_support([e.step for e in kept], MIN_PASSING, MIN_STEPS)
                        or len({e.input_shape[dim] for e in kept}) < MIN_SIZES):
                    continue
                precondition = scope.precondition
                argument = kept[0].argument
                argument = f"args[{argument}]" if argument.isdigit() else argument
                invariants.append(Invariant(
                    relation=RELATION,
                    subject={"api": api, "dim": dim},
                    precondition=tuple(precondition),
                    support={"passing": len(kept), "excluded": len(group) - len(kept),
                             "steps": len({e.step for e in kept}),
                             "sizes": len({e.input_shape[dim] for e in kept})},
                    description=with_condition(
                        f"{api} keeps dim {dim} of its input: ret.shape[{dim}] == {argument}.shape[{dim}]",
                        precondition),
                    sources=sources,
                    domain=domain_of([features[i] for i in scope.passing], CALL_DOMAIN),
                ))
    return invariants


def violates(invariant: Invariant, e: ShapeExample) -> bool:
    dim = invariant.subject["dim"]
    return (min(len(e.input_shape), len(e.output_shape)) > dim and not e.keeps(dim)
            and holds_all(invariant.precondition, e.feature_map()))


def violation(invariant: Invariant, ex: ShapeExample) -> dict[str, Any]:
    dim = invariant.subject["dim"]
    return {"step": ex.step, "api": ex.api, "variable": "", "trace": ex.trace,
            "message": f"{invariant.description}: got {list(ex.output_shape)} from an input of shape "
                       f"{list(ex.input_shape)} at step {ex.step} (dim {dim}: {ex.output_shape[dim]} vs "
                       f"{ex.input_shape[dim]})"}


def needs(req: Needs, inv: Invariant) -> None:
    req.need_call(inv.subject["api"], DESCRIBE_SUMMARY, DESCRIBE_SUMMARY)
