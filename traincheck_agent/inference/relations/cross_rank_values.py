"""CrossRankValue: the tensors an API call receives or returns are distinct on every rank, or
equal on every rank, at the same call of the same step. Data-parallel ranks must load different
batches (a missing ``DistributedSampler`` makes them train on the same data, silently); the
result of a broadcast or all-reduce must be the same everywhere.

Only tensors whose fingerprints are recorded count (policy level ``fingerprint``, e.g. the
default policy's DataLoader batches). Calls are matched across ranks by (run, API, step,
occurrence of the API within the step), and each fingerprinted position (``ret.items[0]``,
``args.tensor``) is one example with one hash per rank. This is the cross-rank form of
DistinctArgument and of Consistent for call values; its per-rank features
(``parties.<name>``) admit CONSISTENT / UNEQUAL clauses.

As CrossRankConsistent does, it also compares within each process group (``trace.groups``):
with data x tensor parallelism the batch is the same across a tensor-parallel group and
differs across a data-parallel one, and each is an invariant of its own family.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import (
    PARTIES,
    FeatureExample,
    deduce,
    holds_all,
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
from traincheck_agent.inference.stream import Collector as StreamCollector
from traincheck_agent.inference.stream import TraceSource
from traincheck_agent.policy.model import DESCRIBE_FINGERPRINT, DESCRIBE_NONE
from traincheck_agent.trace.groups import WORLD, describe_family
from traincheck_agent.trace.schema import KIND_CALL, KIND_GROUPS

RELATION = "CrossRankValue"
LEARNS_FROM = "tensors passed to or returned by the same call on two or more ranks"  # what its examples come from: said when it learns nothing
ID_PREFIX = "cv"  # of its invariants' ids
SUBJECT_FIELDS = ("api", "position", "form")  # the subject fields it reads when it checks
TRIAGE_KIND = "state"  # how triage ranks its violations (``relations.TRIAGE_KINDS``)
CROSS_RANK = True  # its examples join the ranks' halves: checked only with two or more ranks
READS = (KIND_CALL, KIND_GROUPS)  # the record kinds its collector reads
MIN_PASSING = 5
MIN_STEPS = 2
MAX_DEPTH = 3
FORMS = {"distinct": "differs on every rank", "equal": "is equal on every rank"}


@dataclass(frozen=True)
class ValueExample(FeatureExample):
    api: str
    position: str
    step: int
    ranks: tuple[int, ...]
    hashes: tuple[str, ...]
    features: tuple[tuple[str, Any], ...]
    group: str = WORLD  # the family of process groups compared within

    def holds(self, form: str) -> bool:
        distinct = len(set(self.hashes))
        return distinct == len(self.hashes) if form == "distinct" else distinct == 1


def _fingerprints(desc: Any, position: str, depth: int = 0) -> Iterator[tuple[str, str]]:
    """(position, hash) of every fingerprinted tensor in a descriptor."""
    if not isinstance(desc, dict) or depth > MAX_DEPTH:
        return
    fp = desc.get("fp")
    if isinstance(fp, dict) and isinstance(fp.get("h"), str):
        yield position, fp["h"]
    items = desc.get("items")
    if isinstance(items, list):
        for i, item in enumerate(items):
            yield from _fingerprints(item, f"{position}.items[{i}]", depth + 1)


def _positions(record: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for name, desc in (record.get("args") or {}).items():
        yield from _fingerprints(desc, f"args.{name}")
    yield from _fingerprints(record.get("ret"), "ret")


@dataclass(frozen=True)
class RankValue:
    """One rank's half of an example: its hash at one position of one call."""

    run: str
    api: str
    step: int
    occurrence: int
    position: str
    rank: int
    digest: str
    phase: Any
    groups: Memberships = ()


class Collector(StreamCollector):
    def __init__(self, source: TraceSource) -> None:
        super().__init__(source)
        self.step: int | None = None
        self.occurrences: dict[str, int] = defaultdict(int)  # per API, in the current step
        self.groups: Memberships = ()

    def feed(self, record: dict[str, Any]) -> list[RankValue]:
        if record.get("kind") == KIND_GROUPS:
            self.groups = memberships(record)
        if record.get("kind") != KIND_CALL or record.get("exc"):
            return []
        positions = list(_positions(record))
        if not positions:
            return []
        api, step = str(record.get("api")), int(record.get("step", -1))
        if step != self.step:
            self.step, self.occurrences = step, defaultdict(int)
        occurrence = self.occurrences[api]
        self.occurrences[api] += 1
        return [RankValue(self.source.run_id, api, step, occurrence, position, self.source.rank, digest,
                          record.get("phase"), self.groups) for position, digest in positions]


HALF = RankValue  # what a rank publishes for online checks


def agreement_suffices(invariant: Invariant) -> bool:
    """Ranks that all hold the same value never violate an "equal" invariant; a "distinct"
    one needs every value (see ``check.rank_summary``)."""
    return invariant.subject["form"] == "equal"


def agreement_key(half: RankValue) -> tuple:
    return half.api, half.step, half.occurrence, half.position, half.digest


def placement_key(half: RankValue) -> tuple:
    return half.phase, half.groups


def half_features(half: RankValue) -> dict[str, Any]:
    return {"phase": half.phase}


def key_of(item: RankValue | ValueExample) -> tuple[str, str]:
    return item.api, item.position


def invariant_key(invariant: Invariant) -> tuple[str, str]:
    return invariant.subject["api"], invariant.subject["position"]


def finalize(groups: dict[tuple[str, str], list[RankValue]]) -> dict[tuple[str, str], list[ValueExample]]:
    """Join the ranks' values of the same (run, API, step, occurrence, position), across the
    world and within each process group."""
    joined: dict[tuple, dict[int, RankValue]] = defaultdict(dict)
    for values in groups.values():
        for v in values:
            joined[(v.run, v.api, v.step, v.occurrence, v.position)][v.rank] = v
    out: dict[tuple[str, str], list[ValueExample]] = defaultdict(list)
    for (_, api, step, _, position), every_rank in joined.items():
        for family, by_rank in within_groups(every_rank):
            if len(by_rank) < 2:
                continue
            ranks = tuple(sorted(by_rank))
            phases = tuple(by_rank[r].phase for r in ranks)
            features = (("phase", phases[0]), (PARTIES + "phase", phases))
            out[(api, position)].append(ValueExample(api, position, step, ranks,
                                                     tuple(by_rank[r].digest for r in ranks), features, family))
    return out


def infer(groups: dict[tuple[str, str], list[ValueExample]], sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for (api, position), examples in sorted(groups.items()):
        for form, phrase in FORMS.items():
            world: Invariant | None = None
            for family, group in by_family(examples):
                invariant = _hypothesis(api, position, form, phrase, family, group, sources)
                if invariant is None or (family != WORLD and implied_by_world(world, invariant)):
                    continue
                invariants.append(invariant)
                world = invariant if family == WORLD else world
    return invariants


def _hypothesis(api: str, position: str, form: str, phrase: str, family: str, group: list[ValueExample],
                sources: tuple[str, ...]) -> Invariant | None:
    passing = [e for e in group if e.holds(form)]
    if len(passing) < MIN_PASSING or len({e.step for e in passing}) < MIN_STEPS:
        return None
    precondition = deduce([e.feature_map() for e in passing], [e.feature_map() for e in group if not e.holds(form)])
    if precondition is None:
        return None
    where = "every rank" if family == WORLD else describe_family(family)
    phrase = phrase.replace("every rank", where)
    return Invariant(
        relation=RELATION,
        subject={"api": api, "position": position, "form": form} | family_subject(family),
        precondition=tuple(precondition),
        support={"passing": len(passing), "excluded": len(group) - len(passing),
                 "steps": len({e.step for e in passing}), "ranks": max(len(e.ranks) for e in passing)},
        description=with_condition(f"the {position} of {api} {phrase} at the same call", precondition),
        sources=sources,
    )


def violates(invariant: Invariant, e: ValueExample) -> bool:
    return (e.group == family_of_invariant(invariant) and not e.holds(invariant.subject["form"])
            and holds_all(invariant.precondition, e.feature_map()))


def violation(invariant: Invariant, ex: ValueExample) -> dict[str, Any]:
    by_hash: dict[str, list[int]] = defaultdict(list)
    for rank, digest in zip(ex.ranks, ex.hashes, strict=True):
        by_hash[digest].append(rank)
    same = [ranks for ranks in by_hash.values() if len(ranks) > 1]
    what = (f"ranks {same[0]} got the same value" if invariant.subject["form"] == "distinct" and same
            else f"the ranks hold {len(by_hash)} different values")
    return {"step": ex.step, "api": ex.api, "variable": ex.position, "ranks": list(ex.ranks),
            "message": f"{invariant.description}: {what} at step {ex.step}"}


def needs(req: Needs, inv: Invariant) -> None:
    """Fingerprints of the call's returned or given tensors: the hashes compared."""
    position = inv.subject["position"]
    if not isinstance(position, str) or not position.startswith(("ret", "args.")):
        raise ValueError(f"unknown position {position!r}")
    if position.startswith("ret"):
        req.need_call(inv.subject["api"], DESCRIBE_NONE, DESCRIBE_FINGERPRINT)
    else:
        req.need_call(inv.subject["api"], DESCRIBE_FINGERPRINT, DESCRIBE_NONE)
