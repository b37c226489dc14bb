"""Selective instrumentation: what check mode must observe for the invariants it loaded.

Each relation reads a known part of the trace (docs/invariants.md): StateTransition the
``before:`` / ``after:`` snapshots of its event, ConsistentOutput the call records of its API
with argument and return summaries, CrossRankValue a fingerprint at one position, and so on.
``requirements_for`` turns the invariants into that list; ``reduce_policy`` cuts the loaded
policy down to it, and ``CallSelection`` tells the call wrappers which calls to record and at
which detail. Nothing here imports torch.

Limits, stated up front:
- A call's ``parent`` is its nearest enclosing *wrapped* call. Wrapping fewer APIs can only make
  calls look more outermost than in the reference, which matters to one relation only:
  DistinctArgument judges outermost calls, so when one is loaded every API of the policy stays
  wrapped (the ones not needed are scope-only: pushed on the call stack, never recorded).
- The core probes (module calls, ``Module.train``, optimizer ``step`` / ``zero_grad``,
  ``backward``, DDP, ``init_process_group``) stay installed whatever is needed: they drive the
  step clock and find the names of models and optimizers. Only their *records* are selected.
- Cross-rank relations compare ranks: the online checker exchanges each rank's halves through
  the torch.distributed store. In a single process they say nothing and are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import ANY
from traincheck_agent.policy.model import (
    DESCRIBE_FINGERPRINT,
    DESCRIBE_LEVELS,
    DESCRIBE_NONE,
    DESCRIBE_SUMMARY,
    FRAMEWORK_ENTRY_POINTS,
    STATE_EVENTS,
    STATE_POINTS,
    ApiRule,
    Policy,
    StateRule,
)

NONE, SUMMARY, FINGERPRINT = DESCRIBE_NONE, DESCRIBE_SUMMARY, DESCRIBE_FINGERPRINT
SINGLE_PROCESS = "cross-rank, and this process is the only rank"
Levels = tuple[str, str]  # (arguments, return value)

# Relations that compare ranks with each other: nothing to check in a single process.
CROSS_RANK_RELATIONS = ("CrossRankConsistent", "CrossRankValue")

# Which state items give a state record a tensor attribute (``attrs.data`` / ``attrs.grad``).
_ITEMS_WITH_ATTRIBUTE = {
    "data": ("params.data", "buffers", "optimizer.state"),
    "grad": ("params.grad",),
}
# Which state item records variables of a vtype (VarPeriodicChange); parameters are the rest.
_ITEM_OF_VTYPE = {"param_group": "optimizer.hyperparams", "optimizer_settings": "optimizer.hyperparams",
                  "optimizer_state": "optimizer.state", "buffer": "buffers"}


def _stronger(a: str, b: str) -> str:
    return a if DESCRIBE_LEVELS.index(a) >= DESCRIBE_LEVELS.index(b) else b


class CallSelection(NamedTuple):
    """Which calls the wrappers record in check mode, and at which detail.

    ``apis`` maps a recorded API name to its (arguments, return) levels; ``modules`` gives the
    levels for every ``nn.Module`` call not named there (None: only the named ones).
    """

    apis: Mapping[str, Levels]
    modules: Levels | None = None

    def levels(self, name: str, module_call: bool) -> Levels | None:
        found = self.apis.get(name)
        if found is None and module_call:
            return self.modules
        return found


@dataclass
class Requirements:
    """What the loaded invariants need to see."""

    apis: dict[str, Levels] = field(default_factory=dict)
    module_calls: Levels | None = None  # every module call, e.g. to know the enclosing module's mode
    state: dict[str, set[str]] = field(default_factory=dict)  # point -> items
    keep_nesting: bool = False  # keep every policy API wrapped (scope-only where not needed)
    checked: list[Invariant] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)  # reason -> invariant ids

    def need_call(self, api: Any, args: str = NONE, returns: str = NONE) -> None:
        if not isinstance(api, str) or not api:
            raise ValueError(f"expected an API name, got {api!r}")
        old = self.apis.get(api, (NONE, NONE))
        self.apis[api] = (_stronger(old[0], args), _stronger(old[1], returns))

    def need_state(self, point: Any, items: Iterable[str]) -> None:
        if point not in STATE_POINTS:
            raise ValueError(f"unknown state point {point!r}")
        self.state.setdefault(point, set()).update(items)

    def selection(self) -> CallSelection:
        return CallSelection(dict(self.apis), self.module_calls)

    def summary(self) -> str:
        points = ", ".join(f"{p} [{', '.join(sorted(i))}]" for p, i in sorted(self.state.items()))
        return (f"{len(self.checked)} invariants: {len(self.apis)} APIs recorded"
                f"{' + every module call' if self.module_calls else ''}; state {points or 'none'}")


# -------------------------------------------------------------------- per relation


def _items_for(policy: Policy, point: str, attribute: str) -> set[str]:
    """The items that give ``attribute`` at ``point``: those the policy had there (what the
    reference recorded), else the parameters'."""
    candidates = _ITEMS_WITH_ATTRIBUTE.get(attribute)
    if candidates is None:
        raise ValueError(f"unknown tensor attribute {attribute!r}")
    rule = policy.state.get(point)
    had = set(rule.items) & set(candidates) if rule is not None else set()
    return had or {candidates[0]}


def _state_transition(req: Requirements, inv: Invariant, policy: Policy) -> None:
    event, attribute = inv.subject["event"], inv.subject["attribute"]
    if event not in STATE_EVENTS:
        raise ValueError(f"unknown event {event!r}")
    before, after = f"before:{event}", f"after:{event}"
    # An example pairs the two snapshots of one call: only items taken at both points count.
    items = (_items_for(policy, before, attribute) & _items_for(policy, after, attribute)) or {
        _ITEMS_WITH_ATTRIBUTE[attribute][0]}
    req.need_state(before, items)
    req.need_state(after, items)
    # Preconditions read the class of other attributes before the call; a data update is judged
    # against the grad's magnitude before it (an update below the data's resolution is undecided).
    extra = {c.field.split(".", 1)[1] for c in inv.precondition if c.field.startswith("before.")}
    if attribute == "data" and inv.subject.get("effect") == "changed":
        extra.add("grad")
        if event == "optimizer.step":  # and the learning rate the step used (its param groups)
            req.need_state(after, ["optimizer.hyperparams"])
    for other in sorted(extra):
        req.need_state(before, _items_for(policy, before, other))


def _grad_applied(req: Requirements, inv: Invariant, policy: Policy) -> None:
    # The grads backward leaves, and the data (and grad, for negligible updates) around steps.
    req.need_state("after:backward", _items_for(policy, "after:backward", "grad"))
    for point in ("before:optimizer.step", "after:optimizer.step"):
        req.need_state(point, _items_for(policy, point, "data"))
    req.need_state("before:optimizer.step", _items_for(policy, "before:optimizer.step", "grad"))
    req.need_state("after:optimizer.step", ["optimizer.hyperparams"])  # the learning rate a step used
    for api in _step_apis(inv.precondition):  # a precondition on the iteration's optimizer steps
        req.need_call(api, NONE, NONE)


def _step_apis(clauses: Iterable[Any]) -> set[str]:
    """The optimizer step APIs that GradApplied's clauses on ``steps`` name."""
    out: set[str] = set()
    for clause in clauses:
        if clause.kind == ANY:
            out |= _step_apis(clause.value)
        elif clause.field == "steps":
            values = clause.value if isinstance(clause.value, (tuple, list)) else (clause.value,)
            out |= {api for value in values if isinstance(value, str) for api in value.split("+") if api}
    return out


def _periodic(req: Requirements, inv: Invariant, policy: Policy) -> None:
    point, vtype = inv.subject["event"], inv.subject["vtype"]
    item = _ITEM_OF_VTYPE.get(vtype)
    if item is None:  # a parameter class: its numeric framework attributes ride on its records
        rule = policy.state.get(point)
        had = [i for i in ("params.data", "params.grad") if rule is not None and i in rule.items]
        item = had[0] if had else "params.data"
    req.need_state(point, [item])


def _cross_rank_consistent(req: Requirements, inv: Invariant, policy: Policy) -> None:
    point, attribute = inv.subject["event"], inv.subject["attribute"]
    if attribute in _ITEMS_WITH_ATTRIBUTE:
        req.need_state(point, _items_for(policy, point, attribute))
    else:  # a scalar: a hyper-parameter of a param group or a setting of the optimizer
        req.need_state(point, ["optimizer.hyperparams"])


def _cross_rank_value(req: Requirements, inv: Invariant, policy: Policy) -> None:
    position = inv.subject["position"]
    if not isinstance(position, str) or not position.startswith(("ret", "args.")):
        raise ValueError(f"unknown position {position!r}")
    # The hashes compared are fingerprints of the call's returned or given tensors.
    if position.startswith("ret"):
        req.need_call(inv.subject["api"], NONE, FINGERPRINT)
    else:
        req.need_call(inv.subject["api"], FINGERPRINT, NONE)


def _consistent_output(req: Requirements, inv: Invariant, policy: Policy) -> None:
    req.need_call(inv.subject["api"], SUMMARY, SUMMARY)


def _distinct_argument(req: Requirements, inv: Invariant, policy: Policy) -> None:
    family = inv.subject.get("family")
    if family is not None:  # the initialisers the references used, judged as one API
        if not isinstance(family, list) or not all(isinstance(api, str) for api in family):
            raise ValueError("family should be a list of API names")
        for api in family:
            req.need_call(api, SUMMARY, NONE)
    else:
        req.need_call(inv.subject["api"], SUMMARY, NONE)
    req.keep_nesting = True


def _context_argument(req: Requirements, inv: Invariant, policy: Policy) -> None:
    req.need_call(inv.subject["api"], SUMMARY, NONE)
    # The flag is judged against the training flag of the enclosing module: every module call
    # is recorded with its receiver, so that the nearest one is always found.
    req.module_calls = (SUMMARY, NONE)


def _autocast_region(req: Requirements, inv: Invariant, policy: Policy) -> None:
    # A step's autocast states come from all its module calls, not only the watched one's.
    req.module_calls = (SUMMARY, NONE)


def _update_mode(req: Requirements, inv: Invariant, policy: Policy) -> None:
    # The phase of the parameters' snapshot before the step.
    req.need_state("before:optimizer.step", _items_for(policy, "before:optimizer.step", "data"))


def _api_sequence(req: Requirements, inv: Invariant, policy: Policy) -> None:
    subject = inv.subject
    if subject.get("form") == "leads":
        req.need_call(subject["api"], SUMMARY, NONE)  # the flag and the receiver module
    else:  # the receivers' classes tell whether the program has what the invariant speaks of
        req.need_call(subject["api"], SUMMARY, NONE)
        req.need_call(subject["between"], SUMMARY, NONE)


def _threshold(req: Requirements, inv: Invariant, policy: Policy) -> None:
    req.need_call(inv.subject["api"], SUMMARY, SUMMARY)


def _event_contain(req: Requirements, inv: Invariant, policy: Policy) -> None:
    req.need_call(inv.subject["api"], SUMMARY, NONE)  # the receiver's training flag
    req.need_call(inv.subject["child"])


def _input_output(req: Requirements, inv: Invariant, policy: Policy) -> None:
    req.need_call(inv.subject["api"], SUMMARY, SUMMARY)


RELATION_NEEDS: dict[str, Callable[[Requirements, Invariant, Policy], None]] = {
    "StateTransition": _state_transition,
    "GradApplied": _grad_applied,
    "ConsistentOutput": _consistent_output,
    "DistinctArgument": _distinct_argument,
    "ContextArgument": _context_argument,
    "AutocastRegion": _autocast_region,
    "UpdateMode": _update_mode,
    "APISequence": _api_sequence,
    "Threshold": _threshold,
    "VarPeriodicChange": _periodic,
    "EventContain": _event_contain,
    "ConsistentInputOutput": _input_output,
    "CrossRankConsistent": _cross_rank_consistent,
    "CrossRankValue": _cross_rank_value,
}


def requirements_for(invariants: Iterable[Invariant], policy: Policy, world_size: int | None = 1) -> Requirements:
    """What must be observed to check ``invariants`` in a process of a run of ``world_size``
    processes (None: not known yet, as when the script starts its own ranks with
    ``torch.multiprocessing.spawn``; cross-rank invariants are then kept, and the checker decides
    once the process group is up); those that cannot be checked are listed in ``skipped`` by
    reason, the rest in ``checked``."""
    req = Requirements()
    for inv in invariants:
        if inv.relation in CROSS_RANK_RELATIONS and world_size is not None and world_size < 2:
            req.skipped.setdefault(SINGLE_PROCESS, []).append(inv.id)
            continue
        need = RELATION_NEEDS.get(inv.relation)
        if need is None:
            req.skipped.setdefault(f"unknown relation {inv.relation}", []).append(inv.id)
            continue
        trial = Requirements(dict(req.apis), req.module_calls,
                             {p: set(i) for p, i in req.state.items()}, req.keep_nesting)
        try:
            need(trial, inv, policy)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            problem = f"missing subject field {exc}" if isinstance(exc, KeyError) else str(exc)
            req.skipped.setdefault(f"malformed subject ({problem})", []).append(inv.id)
            continue
        req.apis, req.module_calls, req.state, req.keep_nesting = (
            trial.apis, trial.module_calls, trial.state, trial.keep_nesting)
        req.checked.append(inv)
    return req


# -------------------------------------------------------------------- the reduced policy


def _relative_names(rule: ApiRule, apis: Iterable[str]) -> list[str]:
    """The names in ``apis`` that ``rule`` wraps, relative to its module (``func`` or
    ``Class.method``: a rule only wraps the top-level names of its module)."""
    prefix = rule.module + "."
    out = []
    for api in apis:
        if api.startswith(prefix):
            rel = api[len(prefix):]
            if rel.count(".") <= 1 and rule.matches(rel):
                out.append(rel)
    return sorted(out)


def reduce_policy(policy: Policy, req: Requirements) -> tuple[Policy, list[str]]:
    """The policy cut down to ``req``, and the needed APIs that no rule of it wraps (the core
    probes record those; any other is not observed).

    A name is given to the rule whose module is the longest prefix of it, as an exact
    ``include`` (an exact ``Class.method`` is the defining class's, as recorded). With
    ``keep_nesting`` every rule stays as it was, and the wrappers record only what is needed.
    """
    modules = sorted({r.module for r in policy.apis.values()}, key=len, reverse=True)
    owner: dict[str, str] = {}
    # The framework entry points stay wrapped (scope only unless needed): the agent names the
    # models they receive and notes the engines that accumulate gradients.
    wanted = [*req.apis, *(a for a in FRAMEWORK_ENTRY_POINTS if a not in req.apis)]
    for api in wanted:
        for module in modules:
            if api.startswith(module + "."):
                owner[api] = module
                break
    apis: dict[str, ApiRule] = {}
    covered: set[str] = set()
    for rule_id, rule in policy.apis.items():
        mine = [a for a in wanted if owner.get(a) == rule.module]
        names = _relative_names(rule, mine)
        covered.update(f"{rule.module}.{n}" for n in names)
        if req.keep_nesting:
            apis[rule_id] = rule
        elif names:
            apis[rule_id] = ApiRule(rule.id, rule.module, tuple(names), (), rule.args, rule.returns, rule.source)
    state = {point: StateRule(point, tuple(sorted(items)), "invariants") for point, items in sorted(req.state.items())}
    reduced = Policy(
        apis=apis,
        state=state,
        sampling=policy.sampling,
        param_attributes=policy.param_attributes,
        optimizer_attributes=policy.optimizer_attributes,
        exclude_apis=policy.exclude_apis,
        record_module_calls=True,  # which module calls are recorded is the CallSelection's say
        sources=policy.sources,
        digest=policy.digest,
    )
    return reduced, sorted(set(req.apis) - covered)
