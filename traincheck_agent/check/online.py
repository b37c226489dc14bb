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
complete they go to the cross-rank checks (``cross_rank_checks``: summarised, exchanged through
the torch.distributed store, judged by the comparing rank one step later), which only runs of
several ranks load. They start with the header when it shows several ranks, or later, with the
process record written when the process group comes up (ranks a script starts itself with
``torch.multiprocessing.spawn``); until then, and in a single process, they are listed in
``skipped_relations``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from traincheck_agent import faults
from traincheck_agent.inference import relations
from traincheck_agent.inference.coverage import Coverage, violations_in, violations_of
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.stream import Collector, TraceSource, route_by_kind, views
from traincheck_agent.trace.schema import KIND_HEADER, KIND_PROCESS, KIND_SNAPSHOT, KIND_STATE

if TYPE_CHECKING:
    from traincheck_agent.check.cross_rank_checks import CrossRankChecks, ExchangeFactory

Report = Callable[[dict[str, Any]], None]
# One watch as the records of a kind reach it: its record filter, its collector's feed, its judge.
Route = tuple[Callable[[dict[str, Any]], bool] | None, Callable[[dict[str, Any]], Any], Callable[[Any, Report], None]]


class Watch:
    """One relation's collector and the invariants watching each of its example groups."""

    def __init__(self, relation: ModuleType, invariants: list[Invariant], coverage: Coverage | None = None) -> None:
        self.relation = relation
        self.coverage = coverage
        self.by_key: dict[Hashable, list[Invariant]] = defaultdict(list)
        for inv in invariants:
            self.by_key[relation.invariant_key(inv)].append(inv)
        self.collector: Collector | None = None
        record_filter = getattr(relation, "record_filter", None)
        self.accepts: Callable[[dict[str, Any]], bool] | None = (
            None if record_filter is None else record_filter(invariants))

    def judge(self, examples: Any, report: Report) -> None:
        relation, coverage = self.relation, self.coverage
        if coverage is not None and isinstance(examples, list) and len(examples) > 1:  # a snapshot's
            for inv, example in violations_in(relation, self.by_key, examples, coverage):
                report({"invariant": inv.id, "relation": inv.relation, **relation.violation(inv, example)})
            return
        for example in examples:
            for inv in violations_of(relation, self.by_key.get(relation.key_of(example), ()), example, coverage):
                report({"invariant": inv.id, "relation": inv.relation, **relation.violation(inv, example)})

    def watched(self, item: Any) -> bool:
        return self.relation.key_of(item) in self.by_key


class OnlineChecker:
    def __init__(self, invariants: list[Invariant], on_violation: Report,
                 exchange: ExchangeFactory | None = None) -> None:
        self.on_violation = on_violation
        by_relation: dict[str, list[Invariant]] = defaultdict(list)
        for inv in invariants:
            by_relation[inv.relation].append(inv)
        self.unknown_relations = sorted(set(by_relation) - set(relations.MODULES))
        watched = relations.load(by_relation)
        # Examples judged, and outside the references' domain, per invariant (the summary's).
        self.coverage = Coverage()
        self._watches = [Watch(r, by_relation[r.RELATION], self.coverage) for r in watched if not hasattr(r, "HALF")]
        self._rank_watches = [Watch(r, by_relation[r.RELATION], self.coverage) for r in watched
                              if hasattr(r, "HALF")]
        self._cross_rank: CrossRankChecks | None = None
        self._exchange_factory = exchange
        self.skipped_relations = [w.relation.RELATION for w in self._rank_watches]
        self._step = -1
        self._run: tuple[str, int] = ("", 0)  # run id and restart count, from the header
        # What each record kind goes to (each watch's filter, collector and judge); set once the
        # header has made the collectors.
        self._routes: dict[str, list[Route]] = {}
        self._rank_routes: dict[str, list[Watch]] = {}
        self._reads = (False, False)  # whether some collector reads snapshots, state records

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
        kind = record.get("kind", "")
        if kind in (KIND_SNAPSHOT, KIND_STATE) and any(self._reads):
            for view_kind, view in views(record, kind, *self._reads):
                self._route(view_kind, view)
            return
        self._route(kind, record)  # (a snapshot no collector reads still moves the step on)

    def _route(self, kind: str, record: dict[str, Any]) -> None:
        if kind == KIND_PROCESS and self._cross_rank is None and self._rank_watches:
            self._start_cross_rank(record)  # the ranks came up after the header was written
        for accepts, collect, judge in self._routes.get(kind, ()):
            if accepts is not None and not accepts(record):
                continue
            examples = collect(record)
            if examples:
                judge(examples, self.on_violation)
        cross = self._cross_rank
        if cross is None:
            return
        for watch in self._rank_routes.get(kind, ()):
            for half in watch.collector.feed(record):  # type: ignore[union-attr]  # made with the routes
                if watch.watched(half):
                    cross.add(watch.relation.RELATION, half)
        step = record.get("step")
        if isinstance(step, int) and step > self._step:
            self._step = step
            cross.steps_complete(before=step, report=self.on_violation)

    def _start(self, header: dict[str, Any]) -> None:
        source = TraceSource("online", str(header.get("run_id")), int(header.get("rank", 0) or 0))
        routes = []
        for watch in self._watches:
            watch.collector = collector = watch.relation.Collector(source)
            collector.wanted = frozenset(watch.by_key)
            routes.append((watch.relation, (watch.accepts, collector.feed, watch.judge)))
        self._routes = route_by_kind(routes)
        self._update_reads()
        self._run = (source.run_id, int(header.get("restart_count", 0) or 0))
        if self._rank_watches:
            self._start_cross_rank(header)

    def _start_cross_rank(self, facts: dict[str, Any]) -> None:
        """Start the cross-rank checks when ``facts`` (the header, or the process record written
        when the process group came up) show more than one rank."""
        world = facts.get("world_size")
        if not isinstance(world, int) or world < 2:
            return
        from traincheck_agent.check.cross_rank_checks import CrossRankChecks, default_exchange

        run_id, restart = self._run
        rank = facts.get("rank")
        source = TraceSource("online", run_id, rank if isinstance(rank, int) else 0)
        self._cross_rank = CrossRankChecks(self._rank_watches, self._exchange_factory or default_exchange)
        self._cross_rank.run_id = run_id
        self._cross_rank.restart = restart
        self.skipped_relations = []
        for watch in self._rank_watches:
            watch.collector = watch.relation.Collector(source)
        self._rank_routes = route_by_kind((w.relation, w) for w in self._rank_watches)
        self._update_reads()

    def _update_reads(self) -> None:
        kinds = set(self._routes) | set(self._rank_routes)
        self._reads = (KIND_SNAPSHOT in kinds, KIND_STATE in kinds)

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
