"""Cross-rank checks online: each rank publishes, per step, its halves of the cross-rank
examples (a variable's hash at a point, a call's tensor hashes) through the key-value store
that ``torch.distributed`` already runs; the comparing rank (rank 0) joins them with its own one
step later and judges them with the same code as the offline check.

Never a collective and never a blocking wait on the training thread: this runs on the
checker's thread, with a store client of its own (``Store.clone``), non-blocking ``check``
before every ``get``. Keys are ``traincheck/<run id>/<restart>/<step>/<rank>``; the comparer
deletes what it has read. A rank that has not published a step ``timeout_s`` after the comparer
first looked for it is reported as missing, once, and never waited for again.

Cost per step: every rank sets one key (its halves, a few dozen bytes per watched variable);
the comparer does one ``check`` per other rank and one ``get`` per rank that published, so the
comparer's work grows linearly with the world size and the others' stays constant.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import astuple
from typing import Any

import orjson

from traincheck_agent.messages import warn_once

PREFIX = "traincheck"
COMPARER = 0
DEFAULT_TIMEOUT_S = 60.0


def _freeze(value: Any) -> Any:
    """JSON lists back to tuples, so decoded features hash and compare as they did."""
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def encode(halves: dict[str, list[Any]]) -> bytes:
    """Per relation, its halves as field tuples."""
    return orjson.dumps({name: [astuple(h) for h in items] for name, items in halves.items()})


def decode(payload: bytes, factories: dict[str, Callable[..., Any]]) -> dict[str, list[Any]]:
    raw = orjson.loads(payload)
    return {name: [factories[name](*_freeze(fields)) for fields in items]
            for name, items in raw.items() if name in factories}


class StoreExchange:
    """Publishing and fetching per-step payloads through a ``torch.distributed`` store."""

    def __init__(self, store: Any, rank: int, world_size: int, run_id: str, restart: int = 0,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.store, self.rank, self.world_size = store, rank, world_size
        self.prefix = f"{PREFIX}/{run_id}/{restart}"
        self.timeout_s = timeout_s
        self._first_look: dict[int, float] = {}  # step -> when the comparer first looked for it

    @classmethod
    def from_default_group(cls, run_id: str, restart: int = 0, timeout_s: float = DEFAULT_TIMEOUT_S
                           ) -> StoreExchange | None:
        """An exchange over the default process group's store, or None when there is none yet."""
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
            return None
        from torch.distributed import distributed_c10d

        store = distributed_c10d._get_default_store()
        with contextlib.suppress(AttributeError, RuntimeError):
            store = store.clone()  # a client of our own: the training thread keeps its own
        return cls(store, dist.get_rank(), dist.get_world_size(), run_id, restart, timeout_s)

    @property
    def comparer(self) -> bool:
        return self.rank == COMPARER

    def _key(self, step: int, rank: int) -> str:
        return f"{self.prefix}/{step}/{rank}"

    def publish(self, step: int, payload: bytes) -> None:
        self.store.set(self._key(step, self.rank), payload)

    def fetch(self, step: int, final: bool = False, gone: set[int] | frozenset[int] = frozenset()
              ) -> tuple[dict[int, bytes], list[int]] | None:
        """The other ranks' payloads for ``step`` and the ranks newly missing, once every rank has
        published or the timeout has passed; None while still waiting. Ranks in ``gone`` (already
        reported) are not waited for; ``final`` gives up on late ranks at once (end of run)."""
        others = [r for r in range(self.world_size) if r != self.rank and r not in gone]
        ready = [r for r in others if self.store.check([self._key(step, r)])]
        now = time.monotonic()
        first = self._first_look.setdefault(step, now)
        if len(ready) < len(others) and not final and now - first < self.timeout_s:
            return None
        self._first_look.pop(step, None)
        payloads = {}
        for r in ready:
            key = self._key(step, r)
            payloads[r] = self.store.get(key)
            try:
                self.store.delete_key(key)
            except RuntimeError as exc:  # an older store without deletion: keys stay, nothing breaks
                warn_once("store-delete", f"could not delete store key {key}: {exc}")
        return payloads, [r for r in others if r not in ready]
