"""EventContain (the API half; the state half is StateTransition): every call of API P makes a
call of API C inside it, e.g. ``BatchNorm2d.forward`` calls ``F.batch_norm``, a spectrally
normalised layer's forward calls ``SpectralNorm.compute_weight``, ``Tensor.backward`` calls
``torch.autograd.backward``.

Only direct children count (C's nearest recorded caller is P), and C is never a module's
forward: which submodules a model calls is its architecture, not a rule of the framework. A
call is recorded when it returns, so before its caller; each child is noted under its parent's
id until the parent's record arrives. The precondition is deduced from the caller's context
(phase, grad mode, the module's training flag, the flags it was given: ``zero_grad(set_to_none=
False)`` zeroes each grad, ``zero_grad()`` drops them). When no passing call was made inside a
gradient-accumulation micro-step (``accumulating``), the invariant is scoped to calls outside
them: an engine's ``step`` off the accumulation boundary rightly calls no optimizer step. A step
given a closure (L-BFGS, Lightning) gives no example: what it calls is the script's closure, whose
contents change with the loop's settings (Lightning clears grads inside it, except when it
accumulates batches).

A call that a state snapshot precedes (``zero_grad``, ``optimizer.step``, ``backward``) also
carries ``before.grads``: whether any parameter held a grad when it began. Such a call with no
grad has nothing to act on (``zero_grad(set_to_none=False)`` at the top of the first iteration
zeroes nothing), so what it calls then says nothing of what it calls on grads. The feature may
enter a precondition, and an invariant none of whose passing calls found no grad
(``support["found_no_grads"]`` is 0) does not judge a call that found none: it is not covered.
Only that side is gated: a call that found grads where the references' found none (a backward
that accumulates) still has something to act on. The invariant names the snapshot point
(``subject["snapshot"]``), so that a checker takes it.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from typing import Any, NamedTuple

from traincheck_agent.inference.call_context import context_features, module_training
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import (
    deduce_scopes,
    domain_of,
    enough_support,
    holds_all,
    scoped,
    with_condition,
)
from traincheck_agent.inference.relations import Needs
from traincheck_agent.inference.stream import SnapshotCollector, TraceSource
from traincheck_agent.policy.model import DESCRIBE_NONE, DESCRIBE_SUMMARY
from traincheck_agent.trace.schema import KIND_CALL, KIND_SNAPSHOT
from traincheck_agent.trace.snapshot import ABSENT, blocks_of

RELATION = "EventContain"
LEARNS_FROM = "calls of an API that make calls of others inside them"  # what its examples come from: said when it learns nothing
ID_PREFIX = "ec"  # of its invariants' ids
SUBJECT_FIELDS = ("api", "child")  # the subject fields it reads when it checks
TRIAGE_KIND = "ordering"  # how triage ranks its violations (``relations.TRIAGE_KINDS``)
READS = (KIND_CALL, KIND_SNAPSHOT)  # the record kinds its collector reads
SCOPE_FEATURES = ("accumulating",)
GRADS_BEFORE = "before.grads"  # feature: NO_GRADS or SOME_GRADS, from the snapshot that began the call
NO_GRADS, SOME_GRADS = "none", "present"
# The context an invariant is judged in (see ``preconditions.domain_of``).
DOMAIN_FIELDS = ("phase", "grad_enabled", "autocast", "self.training")
FOUND_NO_GRADS = "found_no_grads"  # support: passing calls that began with no grad
# Features of the flag arguments a call was given (``arg.set_to_none``): what a call makes
# depends on them, so they may enter a precondition, and the domain holds the values seen
# (None where a call left the flag to its default).
ARG = "arg."
MIN_PASSING = 5
MIN_STEPS = 2
PENDING_SNAPSHOTS = 8  # ``before`` snapshots kept for calls whose record has not come yet


class ContainExample(NamedTuple):
    """One call of ``api`` and the APIs it called directly."""

    api: str
    children: frozenset[str]
    step: int
    trace: str
    features: tuple[tuple[str, Any], ...]
    snapshot: str | None = None  # the ``before`` snapshot point that gave ``before.grads``

    def feature_map(self) -> dict[str, Any]:  # FeatureExample's: a NamedTuple cannot inherit it
        return dict(self.features)


def _features(record: dict[str, Any], grads: str | None) -> tuple[tuple[str, Any], ...]:
    found = {**context_features(record), "self.training": module_training(record)}
    if grads is not None:
        found[GRADS_BEFORE] = grads
    args = record.get("args")
    if isinstance(args, dict):
        for name, value in args.items():
            if isinstance(value, bool) and isinstance(name, str):
                found[ARG + name] = value
    return tuple(sorted(found.items()))


def _domain_fields(features: list[dict[str, Any]]) -> list[str]:
    """The fixed context fields and every flag argument the calls were given."""
    return [*DOMAIN_FIELDS, *sorted({name for f in features for name in f if name.startswith(ARG)})]


def grads_before(snapshots: list[dict[str, Any]]) -> str | None:
    """``SOME_GRADS`` when a variable of the snapshot records held a grad, ``NO_GRADS`` when
    they recorded grads and every one was None, None when they recorded none."""
    recorded = False
    for record in snapshots:
        for block in blocks_of(record):
            for grad in block.column("grad"):
                if grad is None:
                    recorded = True
                elif grad is not ABSENT:
                    return SOME_GRADS
    return NO_GRADS if recorded else None


class Collector(SnapshotCollector):
    def __init__(self, source: TraceSource) -> None:
        super().__init__(source)
        self.children: dict[Any, set[str]] = defaultdict(set)  # open caller id -> APIs it called
        # call id -> the ``before`` snapshot records of that call (one per variable in an
        # older trace), until its record comes; read only for a call that makes an example.
        self.before: OrderedDict[Any, tuple[str, list[dict[str, Any]]]] = OrderedDict()

    def feed_snapshot(self, record: dict[str, Any]) -> list[ContainExample]:
        where, call = record.get("where"), record.get("call")
        if call is None or not isinstance(where, str) or not where.startswith("before:"):
            return []
        pending = self.before.get(call)
        if pending is not None and pending[0] == where:
            pending[1].append(record)
            return []
        self.before[call] = (where, [record])
        if len(self.before) > PENDING_SNAPSHOTS:
            self.before.popitem(last=False)
        return []

    def feed_other(self, record: dict[str, Any]) -> list[ContainExample]:
        if record.get("kind") != KIND_CALL:
            return []
        api = str(record.get("api"))
        if record.get("parent") is not None and module_training(record) is None:
            self.children[record["parent"]].add(api)
        call_id = record.get("id")
        called = self.children.pop(call_id, set())
        before = self.before.pop(call_id, None) if call_id is not None else None
        if (self.wanted is not None and api not in self.wanted) or (record.get("ctx") or {}).get("closure"):
            return []
        point, grads = (before[0], grads_before(before[1])) if before is not None else (None, None)
        return [ContainExample(api, frozenset(called), int(record.get("step", -1)), self.source.label,
                               _features(record, grads), point if grads is not None else None)]


def key_of(example: ContainExample) -> str:
    return example.api


def invariant_key(invariant: Invariant) -> str:
    return invariant.subject["api"]


def infer(groups: dict[str, list[ContainExample]], sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for api, group in sorted(groups.items()):
        for child in sorted(frozenset().union(*(e.children for e in group))):
            passing = [e for e in group if child in e.children]
            if len(passing) < MIN_PASSING or len({e.step for e in passing}) < MIN_STEPS:
                continue
            features = [e.feature_map() for e in passing]
            for scope in deduce_scopes(features, [e.feature_map() for e in group if child not in e.children],
                                       [e.trace for e in passing]):
                kept = [passing[i] for i in scope.passing]
                if not enough_support([e.step for e in kept], MIN_PASSING, MIN_STEPS):
                    continue
                kept_features = [features[i] for i in scope.passing]
                precondition = scoped(scope.precondition, kept_features, SCOPE_FEATURES)
                subject = {"api": api, "child": child}
                points = {e.snapshot for e in kept}
                point = points.pop() if len(points) == 1 else None
                if point is not None:
                    subject["snapshot"] = point
                invariants.append(Invariant(
                    relation=RELATION,
                    subject=subject,
                    precondition=tuple(precondition),
                    support={"passing": len(kept), "excluded": len(group) - len(kept),
                             FOUND_NO_GRADS: sum(f.get(GRADS_BEFORE) == NO_GRADS for f in kept_features),
                             "steps": len({e.step for e in kept})},
                    description=with_condition(f"every {api} call calls {child}", precondition),
                    sources=sources,
                    domain=domain_of(kept_features, _domain_fields(kept_features)),
                ))
    return invariants


def outside(invariant: Invariant, e: ContainExample) -> str | None:
    """A call that found no grad to act on, where every passing call of the references found
    some."""
    if e.snapshot is not None and not invariant.support.get(FOUND_NO_GRADS) and \
            e.feature_map().get(GRADS_BEFORE) == NO_GRADS:
        return f"{GRADS_BEFORE}={NO_GRADS} never seen"
    return None


def violates(invariant: Invariant, e: ContainExample) -> bool:
    return invariant.subject["child"] not in e.children and holds_all(invariant.precondition, e.feature_map())


def violation(invariant: Invariant, ex: ContainExample) -> dict[str, Any]:
    made = ", ".join(sorted(ex.children)) or "nothing recorded"
    return {"step": ex.step, "api": ex.api, "variable": "", "trace": ex.trace,
            "message": f"{invariant.description}: a call at step {ex.step} did not (it called {made})"}


def needs(req: Needs, inv: Invariant) -> None:
    """The parent API's calls (the receiver's training flag) and the child's, and the grads at
    the snapshot point that begins the parent's calls when the references had it."""
    req.need_call(inv.subject["api"], DESCRIBE_SUMMARY, DESCRIBE_NONE)
    req.need_call(inv.subject["child"], DESCRIBE_NONE, DESCRIBE_NONE)
    point = inv.subject.get("snapshot")
    if point is not None:
        req.need_state(point, req.items_for(point, "grad"))
