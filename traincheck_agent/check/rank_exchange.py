"""Cross-rank checks online: each rank publishes, per step, a compact summary of its halves of
the cross-rank examples through the key-value store that ``torch.distributed`` already runs; the
comparing rank (rank 0) joins them with its own, and asks for the full halves only where the
summaries disagree.

Never a collective and never a blocking wait on the training thread: this runs on the
checker's thread, with a store client of its own (``Store.clone``), a non-blocking ``check``
before every ``get``. A rank that has not published a step ``timeout_s`` after the comparer
first looked for it is reported as missing, once, and never waited for again.

Keys, per step: ``traincheck/<run id>/<restart>/<step>/summary`` and ``.../details``. Every rank
but the comparer *appends* one line to the summary key (``Store.append``), so a step has one key
whatever the world size, and the comparer deletes the step's keys once it is judged. A summary
line holds the rank, one digest per scope (the world, and each process group it shares with
others) over the halves that agreeing ranks cannot violate (``agreement_suffices``), and in full
the few halves that agreement does not settle (values that must *differ* across ranks, e.g.
data-parallel batches).

The digested halves themselves stay on their rank (its last steps, ``cross_rank_checks``) until the
comparer asks for them: it writes the step into one of ``REQUEST_SLOTS`` request keys and counts
it in ``.../requests``, which every rank reads with one ``add(key, 0)`` per step; a rank that
holds an asked step appends its halves to the step's details key. So the steady state sends only
summaries, and a disagreement costs one more step before it is judged. ``docs/checking.md`` works
out the cost as the world grows.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import astuple, dataclass
from typing import Any

import orjson

from traincheck_agent.messages import warn_once

PREFIX = "traincheck"
COMPARER = 0
DEFAULT_TIMEOUT_S = 60.0
# Requests for details cycle through this many keys; a rank more requests behind than this (it
# stalled while the comparer asked for many steps) misses the oldest, reported as missing details.
REQUEST_SLOTS = 64


def _freeze(value: Any) -> Any:
    """JSON lists back to tuples, so decoded features hash and compare as they did."""
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def encode(halves: dict[str, list[Any]]) -> dict[str, list[tuple]]:
    """Per relation, its halves as field tuples (JSON-able)."""
    return {name: [astuple(h) for h in items] for name, items in halves.items() if items}


def decode(raw: dict[str, list[Any]], factories: dict[str, Callable[..., Any]]) -> dict[str, list[Any]]:
    return {name: [factories[name](*_freeze(fields)) for fields in items]
            for name, items in raw.items() if name in factories}


def _lines(payload: bytes) -> dict[int, dict[str, Any]]:
    """The entries appended to a key, by rank (a torn or foreign line is skipped)."""
    out: dict[int, dict[str, Any]] = {}
    for line in payload.split(b"\n"):
        if not line:
            continue
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("r"), int):
            out[entry["r"]] = entry
    return out


@dataclass
class ExchangeStats:
    """What the exchange cost this rank: store round trips and bytes, for the cost figures."""

    steps: int = 0
    round_trips: int = 0
    bytes_sent: int = 0
    bytes_read: int = 0
    details_fetched: int = 0

    def line(self) -> str:
        per = max(self.steps, 1)
        return (f"{self.steps} steps, {self.round_trips / per:.1f} store round trips and "
                f"{self.bytes_sent / per:.0f} B sent, {self.bytes_read / per:.0f} B read per step; "
                f"details fetched for {self.details_fetched} steps")


class StoreExchange:
    """Publishing and fetching per-step summaries through a ``torch.distributed`` store."""

    def __init__(self, store: Any, rank: int, world_size: int, run_id: str, restart: int = 0,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.store, self.rank, self.world_size = store, rank, world_size
        self.prefix = f"{PREFIX}/{run_id}/{restart}"
        self.timeout_s = timeout_s
        self.stats = ExchangeStats()
        # (step, part) -> when the comparer first looked for it
        self._first_look: dict[tuple[int, str], float] = {}
        self._requests_made = 0  # the comparer's requests for details
        self._requests_seen = 0  # the requests this rank has read

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
            store = store.clone()  # type: ignore[attr-defined]  # a client of our own: the training thread keeps its own
        return cls(store, dist.get_rank(), dist.get_world_size(), run_id, restart, timeout_s)

    @property
    def comparer(self) -> bool:
        return self.rank == COMPARER

    def _key(self, step: int, part: str) -> str:
        return f"{self.prefix}/{step}/{part}"

    def _append(self, key: str, entry: dict[str, Any]) -> None:
        line = orjson.dumps(entry) + b"\n"
        self.store.append(key, line)
        self.stats.round_trips += 1
        self.stats.bytes_sent += len(line)

    def _read(self, key: str) -> dict[int, dict[str, Any]]:
        self.stats.round_trips += 1
        if not self.store.check([key]):
            return {}
        payload = self.store.get(key)
        self.stats.round_trips += 1
        self.stats.bytes_read += len(payload)
        return _lines(payload)

    def publish(self, step: int, summary: dict[str, Any]) -> None:
        """This rank's summary of ``step``."""
        self.stats.steps += 1
        self._append(self._key(step, "summary"), {"r": self.rank, **summary})

    def publish_details(self, step: int, details: dict[str, Any]) -> None:
        """This rank's digested halves of ``step``, which the comparer asked for."""
        self._append(self._key(step, "details"), {"r": self.rank, **details})

    def request_details(self, step: int) -> None:
        """Ask every rank for its halves of ``step`` (the comparer, when digests disagree). The
        slot is written before the count that makes it visible."""
        slot = self._requests_made % REQUEST_SLOTS
        self.store.set(f"{self.prefix}/request/{slot}", str(step))
        self.store.add(f"{self.prefix}/requests", 1)
        self._requests_made += 1
        self.stats.round_trips += 2

    def requested_steps(self) -> list[int]:
        """The steps the comparer asked for since the last call (one round trip when none)."""
        count = self.store.add(f"{self.prefix}/requests", 0)
        self.stats.round_trips += 1
        asked = []
        for n in range(max(self._requests_seen, count - REQUEST_SLOTS), count):
            raw = self.store.get(f"{self.prefix}/request/{n % REQUEST_SLOTS}")
            self.stats.round_trips += 1
            with contextlib.suppress(ValueError):
                asked.append(int(raw))
        self._requests_seen = max(self._requests_seen, count)
        return asked

    def still_open(self, step: int) -> bool:
        """Whether the comparer has not judged ``step`` yet (it deletes the step's summary key
        when it has): at exit a rank sends the halves of such steps without being asked."""
        self.stats.round_trips += 1
        return bool(self.store.check([self._key(step, "summary")]))

    def fetch_summaries(self, step: int, final: bool = False, gone: set[int] | frozenset[int] = frozenset()
                        ) -> tuple[dict[int, dict[str, Any]], list[int]] | None:
        """The other ranks' summaries of ``step`` and the ranks newly missing, once every rank
        has published or the timeout has passed; None while still waiting. Ranks in ``gone``
        (already reported) are not waited for; ``final`` gives up on late ranks at once."""
        others = [r for r in range(self.world_size) if r != self.rank and r not in gone]
        return self._wait_for(self._key(step, "summary"), (step, "summary"), others, final, count_step=True)

    def fetch_details(self, step: int, ranks: list[int], final: bool = False
                      ) -> tuple[dict[int, dict[str, Any]], list[int]] | None:
        """The details of ``step`` from ``ranks`` and those that did not send them in time, once
        every one has or the timeout has passed since the request; None while still waiting."""
        return self._wait_for(self._key(step, "details"), (step, "details"), ranks, final)

    def _wait_for(self, key: str, what: tuple[int, str], ranks: list[int], final: bool, count_step: bool = False
                  ) -> tuple[dict[int, dict[str, Any]], list[int]] | None:
        entries = self._read(key)
        ready = {r: entries[r] for r in ranks if r in entries}
        now = time.monotonic()
        first = self._first_look.setdefault(what, now)
        if len(ready) < len(ranks) and not final and now - first < self.timeout_s:
            return None
        self._first_look.pop(what, None)
        if count_step:
            self.stats.steps += 1
        else:
            self.stats.details_fetched += 1
        return ready, [r for r in ranks if r not in ready]

    def forget(self, step: int) -> None:
        """Delete the step's keys (the comparer, once the step is judged)."""
        for part in ("summary", "details"):
            self._delete(self._key(step, part))

    def close(self) -> None:
        """Delete the request keys (the comparer, at exit)."""
        if self._requests_made:
            for slot in range(min(self._requests_made, REQUEST_SLOTS)):
                self._delete(f"{self.prefix}/request/{slot}")
            self._delete(f"{self.prefix}/requests")

    def _delete(self, key: str) -> None:
        try:
            self.store.delete_key(key)
            self.stats.round_trips += 1
        except RuntimeError as exc:  # an older store without deletion: keys stay, nothing breaks
            warn_once("store-delete", f"could not delete store key {key}: {exc}")
