"""A rank's summary of its cross-rank halves for one step: what it publishes instead of the
halves themselves.

Most cross-rank invariants say that ranks *agree* (replicas equal, a broadcast result the same
everywhere): when every rank holds the same values, none of them can be violated, and a digest
per scope settles it. A half goes into the digest of each scope (the world, or the rank's group
of a family) whose invariants watch it and whose precondition can hold on it: the clauses about
the rank's own features are evaluated here, those about all ranks (``parties.*``) count as
holding. If every rank of every scope has the same digest, every example that an invariant
could judge is equal on its ranks; otherwise the comparer fetches the digested halves in full
and judges them exactly as the offline check does. Halves watched by an invariant that
agreement does not satisfy (values that must differ across ranks) go in full, ``direct``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
import xxhash

from traincheck_agent.inference.preconditions import holds_locally
from traincheck_agent.inference.rank_groups import family_of_invariant
from traincheck_agent.trace.groups import WORLD


class _Watch(Protocol):
    relation: Any
    by_key: dict[Any, list[Any]]


@dataclass
class Summary:
    digests: dict[str, str] = field(default_factory=dict)  # scope -> digest of its halves
    direct: dict[str, list[Any]] = field(default_factory=dict)  # relation -> halves sent in full
    digested: dict[str, list[Any]] = field(default_factory=dict)  # relation -> halves in digests


def scope_of(family: str, half: Any) -> str | None:
    """The scope a half is compared in for a family: the world, or its group of that family
    (None when this rank has no group of it)."""
    if family == WORLD:
        return WORLD
    members = dict(half.groups).get(family)
    return None if members is None else f"{family}@{','.join(map(str, members))}"


def _members(scope: str, present: set[int]) -> set[int]:
    if scope == WORLD:
        return present
    _, _, ranks = scope.partition("@")
    return {int(r) for r in ranks.split(",") if r} & present


# Where a half goes, by what decides it (relation, key, the rank's own features and groups): the
# same for a variable step after step, so it is worked out once per variable and point.
Placement = tuple[bool, tuple[str, ...]]  # (sent in full, scopes it is digested in)


def _placement(watch: _Watch, half: Any) -> Placement:
    relation = watch.relation
    invariants = watch.by_key.get(relation.key_of(half), ())
    if any(not relation.agreement_suffices(inv) for inv in invariants):
        return True, ()
    features = relation.half_features(half)
    scopes = {scope_of(family_of_invariant(inv), half) for inv in invariants
              if holds_locally(inv.precondition, features)} - {None}
    return False, tuple(sorted(scopes))  # type: ignore[arg-type]


def summarize(own: dict[str, list[Any]], watches: Mapping[str, _Watch],
              placements: dict[tuple, Placement] | None = None) -> Summary:
    """This rank's summary of one step's halves; ``placements`` memoises where each kind of
    half goes across steps."""
    placements = {} if placements is None else placements
    summary = Summary()
    keys: dict[str, list[Any]] = defaultdict(list)
    for name, halves in own.items():
        watch = watches[name]
        relation = watch.relation
        for half in halves:
            memo_key = (name, relation.key_of(half), relation.placement_key(half))
            placement = placements.get(memo_key)
            if placement is None:
                placement = placements[memo_key] = _placement(watch, half)
            direct, scopes = placement
            if direct:
                summary.direct.setdefault(name, []).append(half)
                continue
            if not scopes:
                continue  # no invariant can judge it: nothing to exchange
            summary.digested.setdefault(name, []).append(half)
            agreement_key = (name, *relation.agreement_key(half))
            for scope in scopes:
                keys[scope].append(agreement_key)
    # In the order the rank took them: ranks running the same program agree on it, and ranks that
    # do not only cost a fetch of the details, never a wrong verdict.
    summary.digests = {scope: xxhash.xxh3_64_hexdigest(orjson.dumps(items)) for scope, items in keys.items()}
    return summary


def disagree(own: dict[str, str], others: dict[int, dict[str, str]], rank: int) -> bool:
    """Whether any scope's ranks (this one and the others that published) hold different
    digests, or some of them none."""
    present = set(others) | {rank}
    digests = {rank: own, **others}
    for scope in set(own).union(*others.values()):
        if len({digests[r].get(scope) for r in _members(scope, present)}) > 1:
            return True
    return False
