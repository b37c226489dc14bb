"""This rank's process groups, written to the trace as a ``groups`` record when they change.

Whatever created them (``new_group``, ``new_subgroups``, a DeviceMesh, DeepSpeed or
Megatron-style model-parallel set-up), torch.distributed keeps every group this rank belongs to,
with its global ranks. Polling that table costs one length comparison while it is unchanged,
so no group-creating API needs wrapping. Groups of one rank and groups of the whole world are
left out: they add nothing to comparing within the world.

The table is looked up at state snapshots and once the default group is initialised; after
that every record the agent writes polls it (a length comparison), so a group is written before
the first record taken after its creation (a DataLoader batch may come before any snapshot).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from traincheck_agent.trace.groups import family_of
from traincheck_agent.trace.schema import KIND_GROUPS, Group


def _group_table() -> tuple[Any, int, int] | None:
    """(torch.distributed's table of groups, this rank, world size), or None before a default
    group exists (never imports torch). The table may hold groups this rank is not in."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    world = getattr(c10d, "_world", None)
    table = getattr(world, "pg_group_ranks", None)
    if not isinstance(table, dict):
        return None
    return table, dist.get_rank(), dist.get_world_size()


def current_groups() -> list[Group]:
    """This rank's groups of 2 or more ranks, short of the whole world, by family."""
    found = _group_table()
    if found is None:
        return []
    table, rank, world_size = found
    names = getattr(getattr(sys.modules.get("torch.distributed.distributed_c10d"), "_world", None), "pg_names", {})
    groups: list[Group] = []
    for pg, ranks in list(table.items()):
        members = sorted(int(r) for r in ranks)
        if rank in members and 2 <= len(members) < world_size:
            group: Group = {"ranks": members, "family": family_of(members)}
            name = names.get(pg) if isinstance(names, dict) else None
            if isinstance(name, str):
                group["name"] = name
            desc = getattr(pg, "group_desc", None)  # e.g. "mesh_tp" for a DeviceMesh dimension
            if isinstance(desc, str) and desc not in ("", "undefined"):
                group["desc"] = desc
            groups.append(group)
    return sorted(groups, key=lambda g: (g["family"], g["ranks"]))


class GroupWatch:
    """Writes a ``groups`` record whenever this rank's set of process groups has changed."""

    def __init__(self, emit: Callable[[dict[str, Any]], None]) -> None:
        self.emit = emit
        self._table: dict | None = None  # torch.distributed's group table, once it exists
        self._seen = 0  # its entries when last written

    def poll(self, step: int, discover: bool = True) -> None:
        """Write a ``groups`` record if the groups changed; ``discover=False`` (the per-record
        path) only looks at a table already found."""
        table = self._table
        if table is None:
            if not discover:
                return
            found = _group_table()
            if found is None:
                return
            self._table = table = found[0]
        if len(table) == self._seen:
            return
        self._seen = len(table)
        groups = current_groups()
        self.emit({"kind": KIND_GROUPS, "t_ns": time.time_ns(), "step": step, "groups": groups})
