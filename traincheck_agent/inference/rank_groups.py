"""What the cross-rank relations share about process groups (``trace.groups``): reading a
rank's groups from its ``groups`` records, splitting the ranks of an example into the world and
each shared group, and keeping only the invariants of a family that the world's do not imply."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.trace.groups import WORLD

Memberships = tuple[tuple[str, tuple[int, ...]], ...]  # (family, global ranks of this rank's group)


class _Half(Protocol):
    @property
    def groups(self) -> Memberships: ...


class _Example(Protocol):
    @property
    def group(self) -> str: ...


H = TypeVar("H", bound=_Half)
E = TypeVar("E", bound=_Example)


def memberships(record: dict[str, Any]) -> Memberships:
    """This rank's groups, from a ``groups`` record."""
    out = {}
    for group in record.get("groups") or ():
        if isinstance(group, dict) and isinstance(group.get("family"), str) and isinstance(group.get("ranks"), list):
            out[group["family"]] = tuple(int(r) for r in group["ranks"])
    return tuple(sorted(out.items()))


def within_groups(by_rank: dict[int, H]) -> list[tuple[str, dict[int, H]]]:
    """The world, then each group (of each family) that two or more of these ranks share.

    When the ranks at hand all lie inside one group (traces of a subset of the ranks, e.g. one
    tensor-parallel group), they say nothing about the world: only the group's part is made."""
    shared: dict[tuple[str, tuple[int, ...]], dict[int, H]] = defaultdict(dict)
    for rank, half in by_rank.items():
        for family, members in half.groups:
            shared[(family, members)][rank] = half
    present = set(by_rank)
    inside_one_group = any(present <= set(members) for _, members in shared)
    parts: list[tuple[str, dict[int, H]]] = [] if inside_one_group else [(WORLD, by_rank)]
    parts += [(family, part) for (family, _), part in sorted(shared.items()) if len(part) >= 2]
    return parts


def by_family(examples: Iterable[E]) -> list[tuple[str, list[E]]]:
    """The examples of each family, the world's first."""
    out: dict[str, list[E]] = defaultdict(list)
    for e in examples:
        out[e.group].append(e)
    return sorted(out.items(), key=lambda item: (item[0] != WORLD, item[0]))


def family_of_invariant(invariant: Invariant) -> str:
    return invariant.subject.get("group", WORLD)


def family_subject(family: str) -> dict[str, str]:
    """What an invariant's subject says about its family (nothing for the world)."""
    return {} if family == WORLD else {"group": family}


def implied_by_world(world: Invariant | None, invariant: Invariant) -> bool:
    """Whether the world's invariant of the same kind already says what a family's says: it
    holds across every rank for every example the family's precondition admits."""
    return world is not None and set(world.precondition) <= set(invariant.precondition)
