"""DistinctArgument: within one step, an API never receives the same parameter twice, e.g. an
init routine initialises each weight once with ``normal_``.

Only parameters are considered: ``"t": "Parameter"`` descriptors, identified by object id
within the process (temporaries could reuse an id after being freed, parameters live on), and
tensors that are a parameter's data (``p.data``, a new object at each access, whose descriptor
names the parameter in ``of``), identified as that parameter: an init routine that runs
``p.data.normal_()`` twice on one weight gives it twice.
Every call is an example: it passes when its parameter was not given to the same API earlier in
the same step.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import (
    FeatureExample,
    deduce_scopes,
    domain_of,
    holds_all,
    with_condition,
)
from traincheck_agent.inference.stream import Collector as StreamCollector
from traincheck_agent.inference.stream import TraceSource, api_filter
from traincheck_agent.trace.schema import KIND_CALL

RELATION = "DistinctArgument"
READS = (KIND_CALL,)  # the record kinds its collector reads
record_filter = api_filter  # checking: each example is one call of the invariant's API
MIN_PASSING = 5
MIN_DISTINCT = 5


class ArgExample(NamedTuple):
    api: str
    argument: str
    oid: int
    name: str
    step: int
    repeated: bool
    trace: str
    features: tuple[tuple[str, Any], ...]

    feature_map = FeatureExample.feature_map


def _parameter_argument(args: dict[str, Any]) -> tuple[str, dict[str, Any], Any] | None:
    """The first argument that is a parameter, or a parameter's data, and the parameter's id."""
    for name, desc in args.items():
        if isinstance(desc, dict):
            if desc.get("t") == "Parameter" and "oid" in desc:
                return name, desc, desc["oid"]
            if "of" in desc:
                return name, desc, desc["of"]
    return None


class Collector(StreamCollector):
    def __init__(self, source: TraceSource) -> None:
        super().__init__(source)
        self.step: int | None = None
        self.seen: set[tuple[str, int]] = set()  # (api, parameter oid) in the current step

    def feed(self, record: dict[str, Any]) -> list[ArgExample]:
        if record.get("kind") != KIND_CALL or record.get("parent") is not None:
            return []  # outermost calls only: a helper's inner calls are its own business
        found = _parameter_argument(record.get("args") or {})
        if found is None:
            return []
        argument, desc, oid = found
        api, step = record["api"], int(record.get("step", -1))
        if step != self.step:
            self.step, self.seen = step, set()
        key = (api, oid)
        repeated = key in self.seen
        self.seen.add(key)
        features = (("phase", record.get("phase")),)
        return [ArgExample(api, argument, oid, str(desc.get("name", "")), step, repeated,
                           self.source.label, features)]


def key_of(example: ArgExample) -> str:
    return example.api


def invariant_key(invariant: Invariant) -> str:
    return invariant.subject["api"]


def infer(groups: dict[str, list[ArgExample]], sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for api, group in sorted(groups.items()):
        passing = [e for e in group if not e.repeated]
        if len(passing) < MIN_PASSING or len({(e.trace, e.oid) for e in passing}) < MIN_DISTINCT:
            continue
        features = [e.feature_map() for e in passing]
        for scope in deduce_scopes(features, [e.feature_map() for e in group if e.repeated],
                                   [e.trace for e in passing]):
            kept = [passing[i] for i in scope.passing]
            if len(kept) < MIN_PASSING or len({(e.trace, e.oid) for e in kept}) < MIN_DISTINCT:
                continue
            description = f"{api} never receives the same parameter twice in one step"
            invariants.append(Invariant(
                relation=RELATION,
                subject={"api": api, "argument": kept[0].argument},
                precondition=tuple(scope.precondition),
                support={"passing": len(kept), "excluded": len(group) - len(kept),
                         "steps": len({e.step for e in kept})},
                description=with_condition(description, scope.precondition),
                sources=sources,
                domain=domain_of([features[i] for i in scope.passing], ("phase",)),
            ))
    return invariants


def violates(invariant: Invariant, e: ArgExample) -> bool:
    return e.repeated and holds_all(invariant.precondition, e.feature_map())


def violation(invariant: Invariant, ex: ArgExample) -> dict[str, Any]:
    which = ex.name or f"(object {ex.oid})"
    return {"step": ex.step, "api": ex.api, "variable": ex.name, "trace": ex.trace,
            "message": f"{invariant.description}: {ex.api} received the same parameter {which} again "
                       f"at step {ex.step}"}
