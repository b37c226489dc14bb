"""Rank, world size and friends: from the launcher's environment at start, and from
``torch.distributed`` once it is initialised."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from traincheck_agent.trace.schema import KIND_PROCESS


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(env.get(name, default))
    except (TypeError, ValueError):
        return default


def launcher_facts(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    env = os.environ if env is None else env
    return {
        "rank": _int(env, "RANK", 0),
        "local_rank": _int(env, "LOCAL_RANK", 0),
        "world_size": _int(env, "WORLD_SIZE", 1),
        "local_world_size": _int(env, "LOCAL_WORLD_SIZE", 1),
        "group_rank": _int(env, "GROUP_RANK", 0),
        "restart_count": _int(env, "TORCHELASTIC_RESTART_COUNT", 0),
    }


def torch_distributed_facts() -> dict[str, Any] | None:
    """Facts from an initialised default process group, or None (never imports torch)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "backend": str(dist.get_backend()),
    }


def process_facts() -> dict[str, Any]:
    facts = launcher_facts()
    live = torch_distributed_facts()
    if live:
        facts.update(live)
    return facts


def distributed_update() -> dict[str, Any]:
    return {"kind": KIND_PROCESS, "t_ns": time.time_ns(), **(torch_distributed_facts() or {})}
