"""StateTransition (the state half of EventContain): what a call does to the variables it
touches, e.g. ``optimizer.step`` changes the data of every parameter that has a grad,
``zero_grad`` leaves grads None or zero, ``backward`` leaves non-zero grads.

Hypotheses come from the before/after snapshot pairs of each event and tensor attribute; each
effect below is tried, its examples split into passing and failing, and a precondition is
deduced. Effects that are no transition (the value was already in the target class in every
passing example) are not emitted: they describe the variable, not the event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from traincheck_agent.inference.examples import (
    DESCRIPTIVE_ATTRS,
    NO_FINGERPRINT,
    NONE,
    NONFINITE,
    NONZERO,
    ZERO,
    TransitionCollector,
    TransitionExample,
)
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
from traincheck_agent.policy.model import STATE_EVENTS
from traincheck_agent.trace.schema import KIND_SNAPSHOT

RELATION = "StateTransition"
LEARNS_FROM = "state snapshots around the calls that change it (optimizer.step, backward, zero_grad)"  # what its examples come from: said when it learns nothing
ID_PREFIX = "st"  # of its invariants' ids
SUBJECT_FIELDS = ("event", "attribute", "effect")  # the subject fields it reads when it checks
TRIAGE_KIND = "state"  # how triage ranks its violations (``relations.TRIAGE_KINDS``)
READS = (KIND_SNAPSHOT,)  # the record kinds its collector reads: state, a snapshot point at a time
MIN_PASSING = 5
MIN_STEPS = 2


class Effect(NamedTuple):
    name: str
    holds: Callable[[TransitionExample], bool]
    phrase: str
    # For effects that put the value in a class: the class set, to tell a transition apart from
    # a value that was there already.
    target: frozenset[str] | None = None
    # Effects about the value *before* the call may not use that value as a precondition.
    about_before: bool = False
    # Examples that cannot tell whether the effect happened: neither passing nor failing, in
    # inference and in checks.
    undecided: Callable[[TransitionExample], bool] = lambda e: False


def _update_rounded_away(e: TransitionExample) -> bool:
    """The data did not change, but the update was too small to show (a learning rate of zero
    at the start of a warm-up, a grad below the data's resolution): the example cannot tell
    whether the call would have moved the data into another class either."""
    return e.attribute == "data" and e.update_negligible and not e.changed


def _empty_throughout(e: TransitionExample) -> bool:
    """The variable held no value before the call and none after it (a ``zero_grad`` at the top
    of the first iteration, before any backward), or zeros both times (``zero_grad(set_to_none=
    False)`` on the grad of a head that this iteration did not use): the call had nothing to
    change, which says nothing about what it does to a value."""
    return e.before_class == e.after_class and e.before_class in (NONE, ZERO)


EFFECTS = (
    Effect("changed", lambda e: e.changed, "changes the {attr}",
           undecided=lambda e: _update_rounded_away(e) or _empty_throughout(e)),
    Effect("unchanged", lambda e: not e.changed, "does not change the {attr}"),
    Effect("becomes_none_or_zero", lambda e: e.after_class in (NONE, ZERO), "leaves the {attr} None or zero",
           frozenset({NONE, ZERO}), undecided=_update_rounded_away),
    Effect("becomes_nonzero", lambda e: e.after_class == NONZERO, "leaves the {attr} non-zero",
           frozenset({NONZERO}),
           undecided=lambda e: (e.rounding_grad and e.attribute == "grad") or _update_rounded_away(e)),
    Effect("stays_finite", lambda e: e.after_class != NONFINITE, "leaves the {attr} finite (no NaN/Inf)"),
    Effect("finds_none_or_zero", lambda e: e.before_class in (NONE, ZERO),
           "finds the {attr} None or zero when it starts", about_before=True),
)
# Features that say which occurrence an example is: when every passing example shares one, the
# invariant is scoped to it, since nothing was learned about the others (a second backward in
# one step is gradient accumulation, not a missing zero_grad).
SCOPE_FEATURES = ("first_in_step",)
# The context an invariant is judged in: only the values its references showed (a parameter in
# bfloat16, or one a tensor-parallel layout splits, is outside an invariant learned without).
DOMAIN_FIELDS = ("vtype", "phase", *DESCRIPTIVE_ATTRS)
EFFECTS_BY_NAME = {e.name: e for e in EFFECTS}
# Effects on the data that an update too small to show leaves undecided: their checks need the
# grad before the call and the learning rate the step used.
JUDGED_AGAINST_UPDATE_SIZE = ("changed", "becomes_none_or_zero", "becomes_nonzero")


def _describe(event: str, attribute: str, effect: Effect) -> str:
    return f"{event} {effect.phrase.format(attr=attribute)}, for every variable it touches"


Collector = TransitionCollector
Groups = dict[tuple[str, str], list[TransitionExample]]


def key_of(example: TransitionExample) -> tuple[str, str]:
    return example.event, example.attribute


def invariant_key(invariant: Invariant) -> tuple[str, str]:
    return invariant.subject["event"], invariant.subject["attribute"]


def infer(groups: Groups, sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for (event, attribute), group in sorted(groups.items()):
        all_features = [e.feature_map() for e in group]
        for effect in EFFECTS:
            features = all_features
            if effect.about_before:
                own = f"before.{attribute}"
                features = [{k: v for k, v in f.items() if k != own} for f in all_features]
            decided = [i for i, e in enumerate(group) if e.fingerprinted and not effect.undecided(e)]
            passing_idx = [i for i in decided if effect.holds(group[i])]
            if len(passing_idx) < MIN_PASSING or len({group[i].step for i in passing_idx}) < MIN_STEPS:
                continue
            if effect.target is not None and all(group[i].before_class in effect.target for i in passing_idx):
                continue  # the value was already there: no transition
            if effect.name == "stays_finite" and all(group[i].after_class == NONE for i in passing_idx):
                continue  # nothing there to be finite
            passing_set = set(passing_idx)
            passing = [features[i] for i in passing_idx]
            failing = [features[i] for i in decided if i not in passing_set]
            for scope in deduce_scopes(passing, failing, [group[i].trace for i in passing_idx]):
                kept = [passing_idx[i] for i in scope.passing]
                if not enough_support([group[i].step for i in kept], MIN_PASSING, MIN_STEPS):
                    continue
                kept_features = [features[i] for i in kept]
                precondition = scoped(scope.precondition, kept_features, SCOPE_FEATURES)
                invariants.append(Invariant(
                    relation=RELATION,
                    subject={"event": event, "attribute": attribute, "effect": effect.name},
                    precondition=tuple(precondition),
                    support={
                        "passing": len(kept),
                        "excluded": len(decided) - len(kept),
                        "steps": len({group[i].step for i in kept}),
                        "variables": len({group[i].var for i in kept}),
                    },
                    description=with_condition(_describe(event, attribute, effect), precondition),
                    sources=sources,
                    domain=domain_of(kept_features, DOMAIN_FIELDS),
                ))
    return invariants


def outcome(e: TransitionExample) -> tuple[Any, ...]:
    """What ``outside`` and ``violates`` read of an example besides its group and features."""
    return (e.before_class, e.after_class, e.changed, e.fingerprinted, e.update_negligible, e.rounding_grad)


def outside(invariant: Invariant, e: TransitionExample) -> str | None:
    """A tensor without a fingerprint: nothing can be said about what the call did to it."""
    return None if e.fingerprinted else NO_FINGERPRINT


def violates(invariant: Invariant, e: TransitionExample) -> bool:
    """The example satisfies the precondition but not the effect."""
    effect = EFFECTS_BY_NAME[invariant.subject["effect"]]
    return (e.fingerprinted and not effect.holds(e) and not effect.undecided(e)
            and holds_all(invariant.precondition, e.feature_map()))


def violation(invariant: Invariant, ex: TransitionExample) -> dict[str, Any]:
    change = "changed" if ex.changed else "unchanged"
    return {"step": ex.step, "variable": ex.var, "trace": ex.trace,
            "message": f"{invariant.description}: violated by {ex.var} at step {ex.step} "
                       f"({ex.attribute}: {ex.before_class} -> {ex.after_class}, {change})"}


def needs(req: Needs, inv: Invariant) -> None:
    """The ``before`` and ``after`` snapshots of its event, with what its precondition reads."""
    event, attribute = inv.subject["event"], inv.subject["attribute"]
    if event not in STATE_EVENTS:
        raise ValueError(f"unknown event {event!r}")
    before, after = f"before:{event}", f"after:{event}"
    # An example pairs the two snapshots of one call: only items taken at both points count.
    items = (req.items_for(before, attribute) & req.items_for(after, attribute)) or req.items_for(None, attribute)
    req.need_state(before, items)
    req.need_state(after, items)
    # Preconditions read the class of other attributes before the call; a data update is judged
    # against the grad's magnitude before it (an update below the data's resolution is undecided).
    extra = {c.field.split(".", 1)[1] for c in inv.precondition if c.field.startswith("before.")}
    if attribute == "data" and inv.subject.get("effect") in JUDGED_AGAINST_UPDATE_SIZE:
        extra.add("grad")
        if event == "optimizer.step":  # and the learning rate the step used (its param groups)
            req.need_state(after, ["optimizer.hyperparams"])
    for other in sorted(extra):
        req.need_state(before, req.items_for(before, other))
