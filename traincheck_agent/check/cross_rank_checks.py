"""The cross-rank half of the online checker: this rank's halves of the cross-rank examples,
summarised (``rank_summary``) and published per step through the torch.distributed store
(``rank_exchange``); the comparing rank compares the summaries one step later, and where they
disagree asks every rank for its halves of that step, joins them with its own and judges them.
The other ranks keep their halves of the last ``MAX_HELD_STEPS`` steps for such a request, and
at exit send those of the steps not judged yet. Loaded only by runs of more than one rank.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from traincheck_agent import faults
from traincheck_agent.check.rank_exchange import StoreExchange, decode, encode
from traincheck_agent.check.rank_summary import Summary, disagree, summarize
from traincheck_agent.exception_text import exception_text
from traincheck_agent.messages import debug, warn_once

if TYPE_CHECKING:
    from traincheck_agent.check.online import Report, Watch


ExchangeFactory = Callable[[str, int], "StoreExchange | None"]
# Halves kept for steps that could not be published yet (no process group yet): the newest ones.
MAX_UNPUBLISHED_STEPS = 64
# Published steps whose halves a rank keeps until the comparer asks for them or moves past them:
# in step with the others, it asks within a step or two. The newest steps are kept, at most this
# many and, past the last two steps, at most MAX_HELD_HALVES halves in all (a large model has
# thousands of halves per step).
MAX_HELD_STEPS = 64
MAX_HELD_HALVES = 20_000
MIN_HELD_STEPS = 2
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
        # The comparer's steps whose details it asked for: its own halves, the other ranks'
        # halves sent in full, and the ranks asked.
        self.awaiting: dict[int, tuple[dict[str, list[Any]], list[dict[str, list[Any]]], list[int]]] = {}
        self.held: dict[int, dict[str, list[Any]]] = {}  # another rank's digested halves, by step
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
            self.awaiting.clear()
            self.held.clear()
            warn_once("cross-rank-exchange", f"the cross-rank exchange failed ({exception_text(exc)}); "
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
                self.exchange.publish(step, {"s": summary.digests, "x": encode(summary.direct)})
                if summary.digests:
                    self._hold(step, summary.digested)
        if self.exchange.comparer:
            self.compare(report, final=False)
        else:
            self._send_requested()

    def _hold(self, step: int, digested: dict[str, list[Any]]) -> None:
        """Keep a published step's digested halves (encoded only if asked for)."""
        self.held[step] = digested
        total = sum(len(halves) for kept in self.held.values() for halves in kept.values())
        for old in sorted(self.held):
            if len(self.held) <= MIN_HELD_STEPS or (len(self.held) <= MAX_HELD_STEPS and total <= MAX_HELD_HALVES):
                break
            total -= sum(len(halves) for halves in self.held.pop(old).values())

    def _send(self, step: int) -> None:
        self.exchange.publish_details(step, {"h": encode(self.held.pop(step))})  # type: ignore[union-attr]  # made

    def _send_requested(self) -> None:
        for step in self.exchange.requested_steps():  # type: ignore[union-attr]  # made
            if step in self.held:
                self._send(step)

    def _send_open(self) -> None:
        """At exit (not the comparer): the halves of the steps the comparer has not judged yet,
        since it may ask for them after this rank is gone, then what it has asked for. It judges
        in step order, so once one step is judged (its summary key deleted) every earlier step
        is judged or already asked for: the newest held steps are looked at until one is."""
        exchange = self.exchange
        for step in sorted(self.held, reverse=True):
            if not exchange.still_open(step):  # type: ignore[union-attr]  # made
                break
            self._send(step)
        self._send_requested()
        self.held.clear()

    def compare(self, report: Report, final: bool) -> None:
        exchange = self.exchange
        if exchange is None or not exchange.comparer:
            return
        for step in sorted(self.awaiting):
            own, others, ranks = self.awaiting[step]
            fetched = exchange.fetch_details(step, ranks, final=final)
            if fetched is None:
                continue  # asked one step ago: the ranks send it as their next step ends
            del self.awaiting[step]
            details, missing = fetched
            if missing:
                report({"invariant": "", "relation": "CrossRankExchange", "step": step, "ranks": missing,
                        "message": f"rank(s) {missing} did not send their halves of step {step} within "
                                   f"{exchange.timeout_s:g} s of the request (their summaries disagreed): "
                                   f"that step is judged without them"})
            others += [decode(entry.get("h") or {}, self.factories) for entry in details.values()]
            exchange.forget(step)
            self._judge(own, others, report)
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
                asked = sorted(r for r, e in entries.items() if e.get("s"))
                exchange.request_details(step)
                self.awaiting[step] = (own, others, asked)
                continue
            exchange.forget(step)
            self._judge(summary.direct, others, report)  # digested examples all agree: none violated

    def _finish(self, report: Report) -> None:
        exchange = self.exchange
        if exchange is not None and not exchange.comparer:
            self._send_open()
            return
        deadline = time.monotonic() + min(FINAL_GRACE_S, exchange.timeout_s if exchange else 0.0)
        while (self.to_compare or self.awaiting) and time.monotonic() < deadline:
            self.compare(report, final=False)
            if self.to_compare or self.awaiting:
                time.sleep(0.05)
        self.compare(report, final=True)
        if self.awaiting:  # asked during the final pass: give the ranks their last chance
            self.compare(report, final=True)
        if exchange is not None:
            exchange.close()

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
