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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from traincheck_agent.inference import relations
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.policy.model import (
    DESCRIBE_LEVELS,
    DESCRIBE_NONE,
    STATE_POINTS,
    ApiRule,
    Policy,
    StateRule,
)

NONE = DESCRIBE_NONE
SINGLE_PROCESS = "cross-rank, and this process is the only rank"
Levels = tuple[str, str]  # (arguments, return value)

# Which state items give a state record a tensor attribute (``attrs.data`` / ``attrs.grad``).
_ITEMS_WITH_ATTRIBUTE = {
    "data": ("params.data", "buffers", "optimizer.state"),
    "grad": ("params.grad",),
}


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
    """What the loaded invariants need to see: each relation module's ``needs`` fills it in
    (``relations.Needs``)."""

    policy: Policy | None = None  # the loaded policy: what the references recorded where
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

    def items_for(self, point: str | None, attribute: str) -> set[str]:
        """The items that give ``attribute`` at ``point``: those the policy had there (what the
        reference recorded), else the parameters'."""
        candidates = _ITEMS_WITH_ATTRIBUTE.get(attribute)
        if candidates is None:
            raise ValueError(f"unknown tensor attribute {attribute!r}")
        had = self.policy_items(point) & set(candidates) if point is not None else set()
        return had or {candidates[0]}

    def policy_items(self, point: str) -> set[str]:
        rule = self.policy.state.get(point) if self.policy is not None else None
        return set(rule.items) if rule is not None else set()

    def selection(self) -> CallSelection:
        return CallSelection(dict(self.apis), self.module_calls)

    def summary(self) -> str:
        points = ", ".join(f"{p} [{', '.join(sorted(i))}]" for p, i in sorted(self.state.items()))
        return (f"{len(self.checked)} invariants: {len(self.apis)} APIs recorded"
                f"{' + every module call' if self.module_calls else ''}; state {points or 'none'}")


def requirements_for(invariants: Iterable[Invariant], policy: Policy, world_size: int | None = 1) -> Requirements:
    """What must be observed to check ``invariants`` in a process of a run of ``world_size``
    processes (None: not known yet, as when the script starts its own ranks with
    ``torch.multiprocessing.spawn``; cross-rank invariants are then kept, and the checker decides
    once the process group is up); those that cannot be checked are listed in ``skipped`` by
    reason, the rest in ``checked``."""
    req = Requirements(policy)
    for inv in invariants:
        if relations.compares_ranks(inv.relation) and world_size is not None and world_size < 2:
            req.skipped.setdefault(SINGLE_PROCESS, []).append(inv.id)
            continue
        found = relations.module(inv.relation)
        if found is None:
            req.skipped.setdefault(f"unknown relation {inv.relation}", []).append(inv.id)
            continue
        trial = Requirements(policy, dict(req.apis), req.module_calls,
                             {p: set(i) for p, i in req.state.items()}, req.keep_nesting)
        try:
            found.needs(trial, inv)
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
    wanted = list(req.apis)
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
