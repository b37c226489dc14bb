"""Process-group families: which ranks a cross-rank relation compares.

Data parallelism keeps a parameter equal on every rank of its data-parallel group; tensor
parallelism keeps a parameter it does not split equal on every rank of its tensor-parallel group
and gives each rank of that group its own shard of the others. In a world of data x tensor
parallel ranks, "equal on every rank" holds for neither kind of parameter, so cross-rank
relations also compare within each group of every family of process groups the run created.

A family is named by its layout, so that the name is the same on every rank of every run of
the same layout, and, when the layout scales, across world sizes: ``size2/stride1`` is the
family of groups of 2 consecutive ranks ({0, 1}, {2, 3}, ...), the usual tensor-parallel
layout; ``size2/stride2`` the groups {0, 2}, {1, 3}, the data-parallel groups beside it. Groups
whose ranks are not evenly spaced are named by their ranks (``ranks:0,3``): they compare only
within runs of the same layout. The whole world is the family ``world``.

The agent writes a ``groups`` record with this rank's groups whenever they change
(``agent.process_groups``); the records name each group's family with ``family_of``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

WORLD = "world"
_SPACED = re.compile(r"size(\d+)/stride(\d+)")


def family_of(ranks: Sequence[int]) -> str:
    """The family name of a group of (global) ranks."""
    ordered = sorted(set(ranks))
    if len(ordered) >= 2:
        stride = ordered[1] - ordered[0]
        if all(b - a == stride for a, b in zip(ordered, ordered[1:], strict=False)):
            return f"size{len(ordered)}/stride{stride}"
    return "ranks:" + ",".join(map(str, ordered))


def describe_family(family: str) -> str:
    """A person's reading of a family name, for messages."""
    if family == WORLD:
        return "every rank"
    spaced = _SPACED.fullmatch(family)
    if spaced:
        size, stride = spaced.groups()
        apart = "consecutive ranks" if stride == "1" else f"ranks {stride} apart"
        return f"every rank of its process group ({size} {apart})"
    return f"every rank of the process group {family.removeprefix('ranks:')}"
