"""The online checker: consumes the records the agent produces, in order, and reports each
violation of the loaded invariants as soon as the example that shows it is complete.

Interface used by the agent (check mode): ``OnlineChecker(invariants, on_violation)``, then
``feed(record)`` for every record of this process (header first), and ``finish()`` at exit.
``on_violation`` receives the relation's violation dict with ``invariant`` and ``relation``
added (keys: step, message, and api / variable / ranks where they apply).

It runs the same collectors and per-example checks as inference and the offline check
(``inference.stream``), so online and offline verdicts agree. Only relations that have loaded
invariants get a collector, and each example is checked only against the invariants of its
group. Relations whose examples join several ranks (those with a ``HALF``: what one rank
contributes, joined by their ``finalize``) collect this rank's halves per step; when a step is
complete they are summarised (``rank_summary``) and go through the ``rank_exchange`` (the
torch.distributed store), and the comparing rank judges the joined examples one step later. In a
single process they are skipped and listed in ``skipped_relations``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Hashable
from types import ModuleType
from typing import Any

from traincheck_agent import faults
from traincheck_agent.check.rank_exchange import StoreExchange, decode, encode
from traincheck_agent.check.rank_summary import Summary, disagree, summarize
from traincheck_agent.inference import relations
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.stream import Collector, TraceSource, route_by_kind
from traincheck_agent.messages import debug, warn_once
from traincheck_agent.trace.schema import KIND_HEADER

Report = Callable[[dict[str, Any]], None]


class _Watch:
    """One relation's collector and the invariants watching each of its example groups."""

    def __init__(self, relation: ModuleType, invariants: list[Invariant]) -> None:
        self.relation = relation
        self.by_key: dict[Hashable, list[Invariant]] = defaultdict(list)
        for inv in invariants:
            self.by_key[relation.invariant_key(inv)].append(inv)
        self.collector: Collector | None = None
        record_filter = getattr(relation, "record_filter", None)
        self.accepts: Callable[[dict[str, Any]], bool] | None = (
            None if record_filter is None else record_filter(invariants))

    def judge(self, examples: Any, report: Report) -> None:
        relation = self.relation
        for example in examples:
            for inv in self.by_key.get(relation.key_of(example), ()):
                if relation.violates(inv, example):
                    report({"invariant": inv.id, "relation": inv.relation, **relation.violation(inv, example)})

    def watched(self, item: Any) -> bool:
        return self.relation.key_of(item) in self.by_key


ExchangeFactory = Callable[[str, int], "StoreExchange | None"]
# Halves kept for steps that could not be published yet (no process group yet): the newest ones.
MAX_UNPUBLISHED_STEPS = 64
FINAL_GRACE_S = 10.0  # how long the comparer waits at exit for the other ranks' last steps


class _CrossRank:
    """This rank's halves of the cross-rank examples, summarised and published per step; on the
    comparing rank, compared with the other ranks' summaries and, where they disagree, joined
    with their halves and judged."""

    def __init__(self, watches: list[_Watch], factory: ExchangeFactory) -> None:
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


def _default_exchange(run_id: str, restart: int) -> StoreExchange | None:
    return StoreExchange.from_default_group(run_id, restart)


class OnlineChecker:
    def __init__(self, invariants: list[Invariant], on_violation: Report,
                 exchange: ExchangeFactory = _default_exchange) -> None:
        self.on_violation = on_violation
        by_relation: dict[str, list[Invariant]] = defaultdict(list)
        for inv in invariants:
            by_relation[inv.relation].append(inv)
        self.unknown_relations = sorted(set(by_relation) - set(relations.MODULES))
        watched = relations.load(by_relation)
        self._watches = [_Watch(r, by_relation[r.RELATION]) for r in watched if not hasattr(r, "HALF")]
        self._rank_watches = [_Watch(r, by_relation[r.RELATION]) for r in watched if hasattr(r, "HALF")]
        self._cross_rank: _CrossRank | None = None
        self._exchange_factory = exchange
        self.skipped_relations = [w.relation.RELATION for w in self._rank_watches]
        self._step = -1
        # Which watches each record kind goes to; set once the header has made the collectors.
        self._routes: dict[str, list[_Watch]] = {}
        self._rank_routes: dict[str, list[_Watch]] = {}

    @property
    def relations(self) -> list[str]:
        """The relations checked in this process."""
        return [w.relation.RELATION for w in self._watches] + (
            [] if self._cross_rank is None else list(self._cross_rank.watches))

    def feed(self, record: dict[str, Any]) -> None:
        if faults.armed:
            faults.fire("checker")
        if record.get("kind") == KIND_HEADER:
            self._start(record)
            return
        kind = record.get("kind")
        for watch in self._routes.get(kind, ()):
            if watch.accepts is not None and not watch.accepts(record):
                continue
            examples = watch.collector.feed(record)
            if examples:
                watch.judge(examples, self.on_violation)
        cross = self._cross_rank
        if cross is None:
            return
        for watch in self._rank_routes.get(kind, ()):
            for half in watch.collector.feed(record):
                if watch.watched(half):
                    cross.add(watch.relation.RELATION, half)
        step = record.get("step")
        if isinstance(step, int) and step > self._step:
            self._step = step
            cross.steps_complete(before=step, report=self.on_violation)

    def _start(self, header: dict[str, Any]) -> None:
        source = TraceSource("online", str(header.get("run_id")), int(header.get("rank", 0) or 0))
        for watch in self._watches:
            watch.collector = watch.relation.Collector(source)
        self._routes = route_by_kind((w.relation, w) for w in self._watches)
        if self._rank_watches and int(header.get("world_size", 1) or 1) > 1:
            self._cross_rank = _CrossRank(self._rank_watches, self._exchange_factory)
            self._cross_rank.run_id = source.run_id
            self._cross_rank.restart = int(header.get("restart_count", 0) or 0)
            self.skipped_relations = []
            for watch in self._rank_watches:
                watch.collector = watch.relation.Collector(source)
            self._rank_routes = route_by_kind((w.relation, w) for w in self._rank_watches)

    def finish(self) -> None:
        self._routes = {}
        for watch in self._watches:
            if watch.collector is not None:
                watch.judge(watch.collector.finish(), self.on_violation)
                watch.collector = None
        if self._cross_rank is not None:
            for watch in self._rank_watches:
                if watch.collector is not None:
                    for half in watch.collector.finish():
                        if watch.watched(half):
                            self._cross_rank.add(watch.relation.RELATION, half)
            self._cross_rank.finish(self.on_violation)
