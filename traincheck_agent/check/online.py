"""The online checker: consumes the records the agent produces, in order, and reports each
violation of the loaded invariants as soon as the example that shows it is complete.

Interface used by the agent (check mode): ``OnlineChecker(invariants, on_violation)``, then
``feed(record)`` for every record of this process (header first), and ``finish()`` at exit.
``on_violation`` receives the relation's violation dict with ``invariant`` and ``relation``
added (keys: step, message, and api / variable / ranks where they apply).

It runs the same collectors and per-example checks as inference and the offline check
(``inference.stream``), so online and offline verdicts agree. Only relations that have loaded
invariants get a collector, and each example is checked only against the invariants of its
group. Relations whose examples join several ranks (those with ``finalize``) need the other
ranks' halves, which one process does not have; they are skipped here and listed in
``skipped_relations``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable
from types import ModuleType
from typing import Any

from traincheck_agent.inference.engine import RELATIONS
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.stream import Collector, TraceSource
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

    def judge(self, examples: Any, report: Report) -> None:
        relation = self.relation
        for example in examples:
            for inv in self.by_key.get(relation.key_of(example), ()):
                if relation.violates(inv, example):
                    report({"invariant": inv.id, "relation": inv.relation, **relation.violation(inv, example)})


class OnlineChecker:
    def __init__(self, invariants: list[Invariant], on_violation: Report) -> None:
        self.on_violation = on_violation
        by_relation: dict[str, list[Invariant]] = defaultdict(list)
        for inv in invariants:
            by_relation[inv.relation].append(inv)
        known = {r.RELATION for r in RELATIONS}
        self.unknown_relations = sorted(set(by_relation) - known)
        self.skipped_relations = sorted(r.RELATION for r in RELATIONS
                                        if r.RELATION in by_relation and hasattr(r, "finalize"))
        self._watches = [_Watch(r, by_relation[r.RELATION]) for r in RELATIONS
                         if r.RELATION in by_relation and not hasattr(r, "finalize")]

    @property
    def relations(self) -> list[str]:
        """The relations checked in this process."""
        return [w.relation.RELATION for w in self._watches]

    def feed(self, record: dict[str, Any]) -> None:
        if record.get("kind") == KIND_HEADER:
            source = TraceSource("online", str(record.get("run_id")), int(record.get("rank", 0) or 0))
            for watch in self._watches:
                watch.collector = watch.relation.Collector(source)
            return
        for watch in self._watches:
            if watch.collector is not None:
                watch.judge(watch.collector.feed(record), self.on_violation)

    def finish(self) -> None:
        for watch in self._watches:
            if watch.collector is not None:
                watch.judge(watch.collector.finish(), self.on_violation)
                watch.collector = None
