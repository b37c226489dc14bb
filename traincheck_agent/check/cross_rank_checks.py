"""The cross-rank half of the online checker: this rank's halves of the cross-rank examples,
summarised (``rank_summary``) and published per step through the torch.distributed store
(``rank_exchange``); the comparing rank joins them with the other ranks' and judges them one
step later. Loaded only by runs of more than one rank.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from traincheck_agent import faults
from traincheck_agent.check.rank_exchange import StoreExchange, decode, encode
from traincheck_agent.check.rank_summary import Summary, disagree, summarize
from traincheck_agent.messages import debug, warn_once

if TYPE_CHECKING:
    from traincheck_agent.check.online import Report, Watch


ExchangeFactory = Callable[[str, int], "StoreExchange | None"]
# Halves kept for steps that could not be published yet (no process group yet): the newest ones.
MAX_UNPUBLISHED_STEPS = 64
FINAL_GRACE_S = 10.0  # how long the comparer waits at exit for the other ranks' last steps


class CrossRankChecks:
    """This rank's halves of the cross-rank examples, summarised and published per step; on the
    comparing rank, compared with the other ranks' summaries and, where they disagree, joined
    with their halves and judged."""

    def __init__(self, watches: list[Watch], factory: ExchangeFactory) -> None:
        self.watches = {w.relation.RELATION: w for w in watches}
        self.factories = {name: w.relation.HALF for name, w in self.watches.items()}
        self.factory = factory
        self.exchange: StoreExchange | None = None
        self.halves: dict[int, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
        self.to_compare: dict[int, tuple[dict[str, list[Any]], Summary]] = {}
        self.run_id, self.restart = "", 0
        self.gone: set[int] = set()
        self.broken = False  # the store failed: cross-rank invariants are off for the rest of the run
        self.placements: dict[tuple, Any] = {}  # summarize's memo, kept across steps

    def add(self, name: str, half: Any) -> None:
        if not self.broken:
            self.halves[half.step][name].append(half)

    def steps_complete(self, before: int, report: Report) -> None:
        """Publish every step below ``before``, then compare what can be compared. A store that
        fails (e.g. one without ``append``) switches the cross-rank checks off, with one warning;
        the other invariants are checked on."""
        self._guarded(lambda: self._steps_complete(before, report))

    def _guarded(self, work: Callable[[], None]) -> None:
        if self.broken:
            return
        try:
            work()
        except Exception as exc:  # any store failure: stop exchanging, keep checking the rest
            self.broken = True
            self.halves.clear()
            self.to_compare.clear()
            warn_once("cross-rank-exchange", f"the cross-rank exchange failed ({type(exc).__name__}: {exc}); "
                                             f"cross-rank invariants are not checked for the rest of the run")

    def _steps_complete(self, before: int, report: Report) -> None:
        if faults.armed:
            faults.fire("exchange")
        if self.exchange is None:
            self.exchange = self.factory(self.run_id, self.restart)
            if self.exchange is None:
                for step in sorted(self.halves)[:-MAX_UNPUBLISHED_STEPS]:
                    del self.halves[step]
                return
        for step in sorted(s for s in self.halves if s < before):
            own = self.halves.pop(step)
            summary = summarize(own, self.watches, self.placements)
            if self.exchange.comparer:
                self.to_compare[step] = (own, summary)
            else:
                self.exchange.publish(step, {"s": summary.digests, "x": encode(summary.direct)},
                                      {"h": encode(summary.digested)} if summary.digests else None)
        self.compare(report, final=False)

    def compare(self, report: Report, final: bool) -> None:
        exchange = self.exchange
        if exchange is None or not exchange.comparer:
            return
        for step in sorted(self.to_compare):
            fetched = exchange.fetch_summaries(step, final=final, gone=self.gone)
            if fetched is None:
                return  # later steps wait behind this one
            entries, missing = fetched
            own, summary = self.to_compare.pop(step)
            if missing:
                self.gone.update(missing)
                report({"invariant": "", "relation": "CrossRankExchange", "step": step, "ranks": missing,
                        "message": f"rank(s) {missing} published nothing for step {step} within "
                                   f"{exchange.timeout_s:g} s: cross-rank invariants are no longer checked "
                                   f"against them (stopped, hung or slower than the timeout)"})
            others = [decode(entry.get("x") or {}, self.factories) for entry in entries.values()]
            if disagree(summary.digests, {r: e.get("s") or {} for r, e in entries.items()}, exchange.rank):
                details = exchange.fetch_details(step)
                others += [decode(entry.get("h") or {}, self.factories) for r, entry in details.items() if r in entries]
                judged = own
            else:
                judged = summary.direct  # every digested example agrees: nothing there can be violated
            exchange.forget(step)
            self._judge(judged, others, report)

    def _finish(self, report: Report) -> None:
        deadline = time.monotonic() + min(FINAL_GRACE_S, self.exchange.timeout_s if self.exchange else 0.0)
        while self.to_compare and time.monotonic() < deadline:
            self.compare(report, final=False)
            if self.to_compare:
                time.sleep(0.05)
        self.compare(report, final=True)

    def _judge(self, own: dict[str, list[Any]], others: list[dict[str, list[Any]]], report: Report) -> None:
        for name, watch in self.watches.items():
            groups: dict[Hashable, list[Any]] = defaultdict(list)
            for halves in (own, *others):
                for half in halves.get(name, ()):
                    groups[watch.relation.key_of(half)].append(half)
            joined = watch.relation.finalize(groups)
            for examples in joined.values():
                watch.judge(examples, report)

    def finish(self, report: Report) -> None:
        self.steps_complete(before=max(self.halves, default=-1) + 1, report=report)
        self._guarded(lambda: self._finish(report))
        if self.exchange is not None and not self.broken:
            debug(f"cross-rank exchange, rank {self.exchange.rank}: {self.exchange.stats.line()}")


def default_exchange(run_id: str, restart: int) -> StoreExchange | None:
    return StoreExchange.from_default_group(run_id, restart)
