"""CrossRankConsistent: a variable holds the same value on every rank at the same point of the
same step, e.g. a DDP replica's parameters after each optimizer step, or a parameter that
tensor parallelism does not split (``tensor_model_parallel=False``) on every TP rank.

Beside the whole world, the ranks are compared within each group of every family of process
groups the run created (``trace.groups``): with data x tensor parallelism a sharded parameter is
equal across its data-parallel group only, and never compared with another shard. An invariant
names its family in ``subject.group`` (absent: the world); one that the world's invariant
at the same point already implies (its precondition is no weaker) is not kept.

Besides tensors (their ``data`` and ``grad`` hashes), the scalar attributes of an optimizer's
param groups and settings are compared the same way, each attribute on its own (``lr``,
``clip_grad``).

Snapshots are matched by (run, point, variable, step, occurrence within the step), so the
*same-named* variable is compared, never two different parameters that happen to share a
shape. Each trace's collector yields its rank's halves; ``finalize`` joins them by key in one pass
(a dict keyed by the match), so the cost grows with the number of snapshots, not with the
square of the number of ranks. Online, the halves are what ranks exchange.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from traincheck_agent.inference.examples import (
    DESCRIPTIVE_ATTRS,
    NO_FINGERPRINT,
    TENSOR_ATTRS,
    marker_hash,
)
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import (
    PARTIES,
    FeatureExample,
    deduce_scopes,
    domain_of,
    enough_support,
    holds_all,
    scoped,
    with_condition,
)
from traincheck_agent.inference.rank_groups import (
    Memberships,
    by_family,
    family_of_invariant,
    family_subject,
    implied_by_world,
    memberships,
    within_groups,
)
from traincheck_agent.inference.relations import Needs
from traincheck_agent.inference.stream import SnapshotCollector, TraceSource
from traincheck_agent.trace.groups import WORLD, describe_family
from traincheck_agent.trace.schema import KIND_GROUPS, KIND_SNAPSHOT
from traincheck_agent.trace.snapshot import blocks_of

RELATION = "CrossRankConsistent"
LEARNS_FROM = "state snapshots of two or more ranks"  # what its examples come from: said when it learns nothing
ID_PREFIX = "cr"  # of its invariants' ids
SUBJECT_FIELDS = ("event", "attribute")  # the subject fields it reads when it checks
TRIAGE_KIND = "state"  # how triage ranks its violations (``relations.TRIAGE_KINDS``)
CROSS_RANK = True  # its examples join the ranks' halves: checked only with two or more ranks
READS = (KIND_SNAPSHOT, KIND_GROUPS)  # the record kinds its collector reads: state, a snapshot point at a time
# A backward inside DDP's no_sync keeps its grads local: when the references never had one, the
# invariant is scoped to synchronised backwards and says nothing about the others.
SCOPE_FEATURES = ("grad_sync",)
# Records whose attributes are scalars, each compared as it is: the hyper-parameters of a param
# group (a rank with another learning rate) and the optimizer's settings (ZeRO's clip_grad: a
# rank that clips its own partition differently leaves the gathered weights equal).
SCALAR_VTYPES = ("param_group", "optimizer_settings")
MIN_PASSING = 5
MIN_STEPS = 2
VARIABLES = "variables"  # the subject field of an invariant about named variables (``_by_name``)
# The context an invariant is judged in (see ``preconditions.domain_of``).
DOMAIN_FIELDS = ("vtype", "phase", "grad_sync", *DESCRIPTIVE_ATTRS)


@dataclass(frozen=True)
class RankExample(FeatureExample):
    where: str
    attribute: str
    var: str
    step: int
    ranks: tuple[int, ...]
    equal: bool
    features: tuple[tuple[str, Any], ...]
    group: str = WORLD  # the family of process groups compared within
    odd_ranks: tuple[int, ...] = ()  # when most ranks agree: the ranks that differ from them
    values: tuple[tuple[int, str], ...] = ()  # a scalar attribute's value on each rank
    run: str = ""  # the reference run, for merging references (``deduce_scopes``)
    fingerprinted: bool = True  # False when a rank could not hash its tensor: undecided



@dataclass(frozen=True)
class RankSnapshot:
    """One rank's half of an example: its hash of a variable at one point of one step."""

    run: str
    where: str
    var: str
    step: int
    occurrence: int
    attribute: str
    rank: int
    digest: str | None
    features: tuple[tuple[str, Any], ...]
    groups: Memberships = ()


SCALAR_PREFIX = "v:"


def _scalar_digest(value: Any) -> str:
    """A scalar's own value stands for its hash: equal values, equal digests."""
    return f"{SCALAR_PREFIX}{value!r}"


class Collector(SnapshotCollector):
    def __init__(self, source: TraceSource) -> None:
        super().__init__(source)
        self.rank = source.rank
        self.occurrences: dict[tuple, int] = defaultdict(int)
        self.groups: Memberships = ()

    def feed_other(self, record: dict[str, Any]) -> list[RankSnapshot]:
        kind = record.get("kind")
        if kind == "process" and isinstance(record.get("rank"), int):
            self.rank = record["rank"]
        if kind == KIND_GROUPS:
            self.groups = memberships(record)
        return []

    def feed_snapshot(self, record: dict[str, Any]) -> list[RankSnapshot]:
        where, step, phase = str(record.get("where")), int(record.get("step", -1)), record.get("phase")
        sync = [("grad_sync", record.get("grad_sync", True))] if where.endswith(":backward") else []
        out: list[RankSnapshot] = []
        for block in blocks_of(record):
            for i, var in enumerate(block.names):
                out += self._variable((where, var, step), phase, sync, block.vtypes[i], block.attrs(i))
        return out

    def _variable(self, base: tuple[str, str, int], phase: Any, sync: list[tuple[str, Any]], vtype: Any,
                  attrs: dict[str, Any]) -> list[RankSnapshot]:
        occurrence = self.occurrences[base]
        self.occurrences[base] += 1
        features = tuple(sorted(
            [("vtype", vtype), ("phase", phase), *sync]
            + [(name, attrs[name]) for name in DESCRIPTIVE_ATTRS if name in attrs]
        ))
        shape = attrs.get("shape")
        party = (*features, ("shape", tuple(shape) if isinstance(shape, list) else None))
        if vtype in SCALAR_VTYPES:
            return [RankSnapshot(self.source.run_id, *base, occurrence, attribute, self.rank, _scalar_digest(value),
                                 party, self.groups)
                    for attribute, value in sorted(attrs.items()) if value is not None]  # None: not read
        return [RankSnapshot(self.source.run_id, *base, occurrence, attribute, self.rank, value.get("h"), party,
                             self.groups)
                for attribute in TENSOR_ATTRS if isinstance(value := attrs.get(attribute), dict)]


HALF = RankSnapshot  # what a rank publishes for online checks


def agreement_suffices(invariant: Invariant) -> bool:
    """Ranks that all hold the same value never violate it (see ``check.rank_summary``)."""
    return True


def agreement_key(half: RankSnapshot) -> tuple:
    """What must be the same on every rank for the examples of this half to agree."""
    return half.where, half.var, half.step, half.occurrence, half.attribute, half.digest


def placement_key(half: RankSnapshot) -> tuple:
    """What decides, besides its key, which invariants can judge the half and where: its own
    features and groups."""
    return half.features, half.groups


def half_features(half: RankSnapshot) -> dict[str, Any]:
    """The features of an example as this rank alone sees them."""
    return dict(half.features)


def key_of(item: RankSnapshot | RankExample) -> tuple[str, str]:
    return item.where, item.attribute


def invariant_key(invariant: Invariant) -> tuple[str, str]:
    return invariant.subject["event"], invariant.subject["attribute"]


def finalize(groups: dict[tuple[str, str], list[RankSnapshot]]) -> dict[tuple[str, str], list[RankExample]]:
    """Join the ranks' snapshots of the same (run, point, variable, step, occurrence), across
    the world and within each process group."""
    joined: dict[tuple, dict[int, RankSnapshot]] = defaultdict(dict)
    for snapshots in groups.values():
        for s in snapshots:
            joined[(s.run, s.where, s.var, s.step, s.occurrence, s.attribute)][s.rank] = s
    out: dict[tuple[str, str], list[RankExample]] = defaultdict(list)
    for (run, where, var, step, _, attribute), every_rank in joined.items():
        for family, by_rank in within_groups(every_rank):
            if len(by_rank) < 2:
                continue
            ranks = tuple(sorted(by_rank))
            digests = {r: by_rank[r].digest for r in ranks}
            fingerprinted = not any(marker_hash(d) for d in digests.values())
            equal = fingerprinted and len(set(digests.values())) == 1
            values = () if equal else tuple((r, d[len(SCALAR_PREFIX):]) for r, d in digests.items()
                                            if d is not None and d.startswith(SCALAR_PREFIX))
            out[(where, attribute)].append(RankExample(
                where, attribute, var, step, ranks, equal,
                _example_features([by_rank[r].features for r in ranks]), family,
                _odd_ranks(digests) if fingerprinted else (), values, run, fingerprinted))
    return out


def _odd_ranks(digests: dict[int, str | None]) -> tuple[int, ...]:
    """The ranks outside the value that more than half of the ranks hold; () when none does."""
    counts = Counter(digests.values())
    value, held = counts.most_common(1)[0]
    if held * 2 <= len(digests) or held == len(digests):
        return ()
    return tuple(r for r, d in digests.items() if d != value)


def _example_features(per_rank: list[tuple[tuple[str, Any], ...]]) -> tuple[tuple[str, Any], ...]:
    """The lowest rank's features, plus each feature's values on all ranks (``parties.<name>``)
    for CONSISTENT / UNEQUAL clauses, e.g. "the shape is the same on every rank"."""
    maps = [dict(f) for f in per_rank]
    out = {k: v for k, v in maps[0].items() if k != "shape"}
    for name in sorted(set().union(*maps)):
        out[PARTIES + name] = tuple(m.get(name) for m in maps)
    return tuple(sorted(out.items()))


def infer(groups: dict[tuple[str, str], list[RankExample]], sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for (where, attribute), examples in sorted(groups.items()):
        world: list[Invariant] = []
        for family, group in by_family(examples):
            found = _hypotheses(where, attribute, family, group, sources)
            if family != WORLD:
                found = [inv for inv in found if not any(implied_by_world(w, inv) for w in world)]
            invariants += found
            world = [w for w in found if VARIABLES not in w.subject] if family == WORLD else world
    return invariants


def _hypotheses(where: str, attribute: str, family: str, group: list[RankExample], sources: tuple[str, ...]
                ) -> list[Invariant]:
    group = [e for e in group if e.fingerprinted]  # a marker says neither equal nor unequal
    passing = [e for e in group if e.equal]
    if len(passing) < MIN_PASSING or len({e.step for e in passing}) < MIN_STEPS:
        return []
    features = [e.feature_map() for e in passing]
    description = f"the {attribute} of each same-named variable is equal on {describe_family(family)} at {where}"
    subject = {"event": where, "attribute": attribute} | family_subject(family)
    out = []
    covered: set[str] = set()  # variables some scoped invariant judges
    for scope in deduce_scopes(features, [e.feature_map() for e in group if not e.equal], [e.run for e in passing]):
        kept = [passing[i] for i in scope.passing]
        if not enough_support([e.step for e in kept], MIN_PASSING, MIN_STEPS):
            continue
        kept_features = [features[i] for i in scope.passing]
        precondition = scoped(scope.precondition, kept_features, SCOPE_FEATURES)
        out.append(Invariant(
            relation=RELATION,
            subject=subject,
            precondition=tuple(precondition),
            support={"passing": len(kept), "excluded": len(group) - len(kept),
                     "steps": len({e.step for e in kept}), "variables": len({e.var for e in kept})},
            description=with_condition(description, precondition),
            sources=sources,
            domain=domain_of(kept_features, DOMAIN_FIELDS),
        ))
        covered |= {e.var for e in passing if holds_all(precondition, e.feature_map())}
    named = _by_name(where, attribute, family, group, covered, sources)
    return out + ([named] if named is not None else [])


def _by_name(where: str, attribute: str, family: str, group: list[RankExample], covered: set[str],
             sources: tuple[str, ...]) -> Invariant | None:
    """Equality of the variables no precondition could scope, named one by one: the replicated
    parameters of a tensor-parallel layout that marks nothing look like its shards in every
    feature, but each of them was equal on every rank in every reference, and each shard never
    was. A variable that any reference showed unequal is left out."""
    equal: dict[str, list[RankExample]] = defaultdict(list)
    unequal: set[str] = set()
    for e in group:
        if e.var not in covered:
            (equal[e.var].append(e) if e.equal else unequal.add(e.var))
    names = sorted(v for v, examples in equal.items()
                   if v not in unequal and len({e.step for e in examples}) >= MIN_STEPS)
    kept = [e for v in names for e in equal[v]]
    if not names or len(kept) < MIN_PASSING:
        return None
    features = [e.feature_map() for e in kept]
    precondition = scoped([], features, SCOPE_FEATURES)
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    description = (f"the {attribute} of each of {len(names)} named variables ({shown}) is equal on "
                   f"{describe_family(family)} at {where}")
    return Invariant(
        relation=RELATION,
        subject={"event": where, "attribute": attribute, VARIABLES: names} | family_subject(family),
        precondition=tuple(precondition),
        support={"passing": len(kept), "excluded": len(group) - len(kept),
                 "steps": len({e.step for e in kept}), "variables": len(names)},
        description=with_condition(description, precondition),
        sources=sources,
        domain=domain_of(features, DOMAIN_FIELDS),
    )


def outside(invariant: Invariant, e: RankExample) -> str | None:
    """A rank that could not hash its tensor: nothing can be said about agreement."""
    return None if e.fingerprinted else NO_FINGERPRINT


def violates(invariant: Invariant, e: RankExample) -> bool:
    if not e.fingerprinted:
        return False
    names = invariant.subject.get(VARIABLES)
    if names is not None and e.var not in _name_set(invariant):
        return False
    return e.group == family_of_invariant(invariant) and not e.equal and holds_all(invariant.precondition,
                                                                                  e.feature_map())


_NAME_SETS: dict[str, frozenset[str]] = {}


def _name_set(invariant: Invariant) -> frozenset[str]:
    """The named variables of an invariant, as a set (made once per invariant)."""
    found = _NAME_SETS.get(invariant.id)
    if found is None:
        names = invariant.subject.get(VARIABLES)
        found = _NAME_SETS[invariant.id] = frozenset(map(str, names)) if isinstance(names, list) else frozenset()
    return found


def violation(invariant: Invariant, ex: RankExample) -> dict[str, Any]:
    found = {"step": ex.step, "variable": ex.var, "ranks": list(ex.ranks)}
    if ex.odd_ranks:
        found["odd_ranks"] = list(ex.odd_ranks)
        agreeing = [r for r in ex.ranks if r not in ex.odd_ranks]
        what = f"{ex.var} on rank(s) {list(ex.odd_ranks)} differs from ranks {agreeing}"
    else:
        what = f"{ex.var} differs across ranks {list(ex.ranks)}"
    if ex.values:
        found["values"] = {str(rank): value for rank, value in ex.values}
        what += " (" + ", ".join(f"{ex.attribute} {value} on rank {rank}" for rank, value in ex.values) + ")"
    return found | {"message": f"{invariant.description}: {what} at step {ex.step} ({ex.where})"}


def needs(req: Needs, inv: Invariant) -> None:
    """Its snapshot point: the tensor attribute's items, or the optimizer's hyper-parameters."""
    point, attribute = inv.subject["event"], inv.subject["attribute"]
    if attribute in TENSOR_ATTRS:
        req.need_state(point, req.items_for(point, attribute))
    else:  # a scalar: a hyper-parameter of a param group or a setting of the optimizer
        req.need_state(point, ["optimizer.hyperparams"])
