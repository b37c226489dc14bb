"""DistinctArgument: within one step, an API never receives the same parameter twice, e.g. an
init routine initialises each weight once with ``normal_``.

Initialisers are judged wherever they are called (``model.apply(init_fn)`` nests them in a
recorded call) unless another initialisation encloses them (the trace marks those ``in_init``);
other APIs only as outermost calls. Only parameters are considered: ``"t": "Parameter"`` descriptors, identified by object id
within the process (temporaries could reuse an id after being freed, parameters live on), and
tensors that are a parameter's data (``p.data``, a new object at each access, whose descriptor
names the parameter in ``of``), identified as that parameter: an init routine that runs
``p.data.normal_()`` twice on one weight gives it twice.
Every call is an example: it passes when its parameter was not given to the same API earlier in
the same step.

Initialisers (``torch.nn.init.*`` and the in-place fills ``Tensor.normal_`` / ``uniform_`` /
``zero_`` / ``fill_``) also form one family, judged as if they were one API: a custom init that
a generic one overwrites (``isinstance``-matched layers initialised in their constructor and
again by the model's init loop) gives one parameter to two different initialisers. A layer's
own default initialisation runs inside its ``reset_parameters``, which the policy records, so
it is an inner call and does not count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import (
    deduce_scopes,
    domain_of,
    holds_all,
    with_condition,
)
from traincheck_agent.inference.relations import Needs
from traincheck_agent.inference.stream import Collector as StreamCollector
from traincheck_agent.inference.stream import TraceSource
from traincheck_agent.policy.model import DESCRIBE_NONE, DESCRIBE_SUMMARY
from traincheck_agent.trace.initialisers import is_initialiser
from traincheck_agent.trace.schema import KIND_CALL

RELATION = "DistinctArgument"
LEARNS_FROM = "calls of an API that receive parameters, such as initialisers"  # what its examples come from: said when it learns nothing
ID_PREFIX = "di"  # of its invariants' ids
SUBJECT_FIELDS = ("api", "argument")  # the subject fields it reads when it checks
TRIAGE_KIND = "ordering"  # how triage ranks its violations (``relations.TRIAGE_KINDS``)
READS = (KIND_CALL,)  # the record kinds its collector reads
MIN_PASSING = 5
MIN_DISTINCT = 5
INITIALISERS = "initialisers"  # the family's name, in place of an API


def record_filter(invariants: Iterable[Invariant]) -> Callable[[dict[str, Any]], bool]:
    """Checking: each example is one call of the invariant's API, or of an initialiser for the
    family's invariant."""
    apis = frozenset(inv.subject["api"] for inv in invariants)
    family = INITIALISERS in apis
    return lambda record: record.get("api") in apis or (family and is_initialiser(record.get("api") or ""))


class ArgExample(NamedTuple):
    api: str
    argument: str
    oid: int
    name: str
    step: int
    repeated: bool
    trace: str
    features: tuple[tuple[str, Any], ...]
    member: str = ""  # for the initialisers' family: the API called
    first: str = ""  # for a repeat in the family: the API that gave the parameter first

    def feature_map(self) -> dict[str, Any]:  # FeatureExample's: a NamedTuple cannot inherit it
        return dict(self.features)


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
        self.seen: dict[tuple[str, int], str] = {}  # (api or family, parameter oid) in the current step -> API

    def feed(self, record: dict[str, Any]) -> list[ArgExample]:
        if record.get("kind") != KIND_CALL:
            return []
        api = record["api"]
        if is_initialiser(api):
            if (record.get("ctx") or {}).get("in_init"):
                return []  # part of another initialisation (kaiming_normal_'s normal_, a reset_parameters)
        elif record.get("parent") is not None:
            return []  # outermost calls only: a helper's inner calls are its own business
        found = _parameter_argument(record.get("args") or {})
        if found is None:
            return []
        argument, desc, oid = found
        step = int(record.get("step", -1))
        if step != self.step:
            self.step, self.seen = step, {}
        name, features = str(desc.get("name", "")), (("phase", record.get("phase")),)
        out = []
        for key in ((api, oid), (INITIALISERS, oid)) if is_initialiser(api) else ((api, oid),):
            first = self.seen.get(key)
            if first is None:
                self.seen[key] = api
            out.append(ArgExample(key[0], argument, oid, name, step, first is not None, self.source.label, features,
                                  api if key[0] == INITIALISERS else "", first or ""))
        return out


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
            subject: dict[str, Any] = {"api": api, "argument": kept[0].argument}
            if api == INITIALISERS:
                subject["argument"] = "tensor"
                subject["family"] = sorted({e.member for e in group})
                description = "no parameter is initialised twice in one step (by any initialiser)"
            else:
                description = f"{api} never receives the same parameter twice in one step"
            invariants.append(Invariant(
                relation=RELATION,
                subject=subject,
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
    if ex.member:
        message = (f"{invariant.description}: {ex.member} initialised parameter {which} again at step {ex.step} "
                   f"(first by {ex.first})")
    else:
        message = f"{invariant.description}: {ex.api} received the same parameter {which} again at step {ex.step}"
    return {"step": ex.step, "api": ex.member or ex.api, "variable": ex.name, "trace": ex.trace, "message": message}


def needs(req: Needs, inv: Invariant) -> None:
    """Its API's calls (the family's, for the initialisers), with every API of the policy kept
    wrapped: it judges outermost calls only."""
    family = inv.subject.get("family")
    if family is not None:  # the initialisers the references used, judged as one API
        if not isinstance(family, list) or not all(isinstance(api, str) for api in family):
            raise ValueError("family should be a list of API names")
        for api in family:
            req.need_call(api, DESCRIBE_SUMMARY, DESCRIBE_NONE)
    else:
        req.need_call(inv.subject["api"], DESCRIBE_SUMMARY, DESCRIBE_NONE)
    req.keep_nesting = True
