"""Examples stream out of records: the interface every relation implements, so that inference,
offline checks and the online checker in the training process share one code path.

A relation module provides:

* ``RELATION``: its name; ``LEARNS_FROM``: what its examples come from, in a few words (the
  user is told when a relation found nothing to learn);
* ``READS``: the record kinds (``trace.schema``) its collector reads; records of other kinds
  are never fed to it. State is read either per variable (``state``) or per snapshot point
  (``snapshot``, its variables in columns), whatever form the trace holds (``views``);
* ``Collector(source)``: the per-trace (per-process) state machine; ``feed(record)`` returns
  the examples that record completes, ``finish()`` those complete at the end of the trace;
* ``key_of(example)`` / ``invariant_key(invariant)``: the group of examples a hypothesis is
  judged on, and the group an invariant watches;
* ``infer(groups, sources)``: hypothesise, split passing from failing, deduce preconditions;
* ``violates(invariant, example)`` and ``violation(invariant, example)``;
* optionally ``outcome(example)``: a hashable summary of all that ``outside`` and ``violates``
  read of an example besides its group and its ``features``; examples that share all three are
  judged once per batch (``coverage.violations_in``);
* optionally ``record_filter(invariants)``: for checking, a predicate on records that keeps
  only those the given invariants can be judged on (the collector sees no others);
* optionally ``finalize(groups)``: work that needs every trace, run once after the last one
  (joining the ranks' halves of cross-rank examples, ordering);
* for cross-rank relations, ``HALF``: the class of what one rank contributes to an example
  (what its collector yields and what ranks exchange online).

Examples are built while the records stream by; only a collector's pending state (the
``before`` half of a snapshot pair, the children of an open call, the current step) is held.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from traincheck_agent.trace.schema import KIND_SNAPSHOT, KIND_STATE
from traincheck_agent.trace.snapshot import expand, from_state

if TYPE_CHECKING:  # the reader is for reading trace files, which a checking process never does
    from traincheck_agent.trace.reader import TraceFile

Groups = dict[Hashable, list[Any]]
T = TypeVar("T")


class TraceSource(NamedTuple):
    """Where a stream of records comes from: the trace's label (its file name), run and rank."""

    label: str
    run_id: str
    rank: int

    @classmethod
    def of(cls, trace: TraceFile) -> TraceSource:
        header = trace.header
        return cls(trace.path.name, str(header.get("run_id")), int(header.get("rank", 0)))


class Collector:
    """Base collector: no pending state. Relations override ``feed`` (and ``finish``).

    ``wanted``, set by a checker, holds the keys (``key_of``) of the example groups its
    invariants watch; a collector may skip building examples of other keys (None: every key,
    as inference needs)."""

    wanted: frozenset[Hashable] | None = None

    def __init__(self, source: TraceSource) -> None:
        self.source = source

    def feed(self, record: dict[str, Any]) -> Iterable[Any]:
        return ()

    def finish(self) -> Iterable[Any]:
        return ()


class SnapshotCollector(Collector):
    """Base of collectors that read state a snapshot point at a time (``READS`` holds
    ``snapshot``): ``feed_snapshot`` gets each snapshot record, and a per-variable ``state``
    record (an older trace, records made by hand) as a snapshot of one variable; records of other
    kinds go to ``feed_other``."""

    def feed(self, record: dict[str, Any]) -> Iterable[Any]:
        kind = record.get("kind")
        if kind == KIND_SNAPSHOT:
            return self.feed_snapshot(record)
        if kind == KIND_STATE:
            return self.feed_snapshot(from_state(record))
        return self.feed_other(record)

    def feed_snapshot(self, record: dict[str, Any]) -> Iterable[Any]:
        return ()

    def feed_other(self, record: dict[str, Any]) -> Iterable[Any]:
        return ()


def api_filter(invariants: Iterable[Any]) -> Callable[[dict[str, Any]], bool]:
    """A ``record_filter`` for relations whose every example comes from one call record of
    the API that its invariant names (``subject["api"]``), and whose collector keeps no state
    across APIs: a record of another API can complete no watched example."""
    apis = frozenset(inv.subject["api"] for inv in invariants)
    return lambda record: record.get("api") in apis


def route_by_kind(targets: Iterable[tuple[ModuleType, T]]) -> dict[str, list[T]]:
    """For each record kind, the targets whose relation reads it (``READS``), in order.

    Most records concern a few relations only (state snapshots feed two of them), so routing
    by kind spares every other collector a call per record."""
    routes: dict[str, list[T]] = defaultdict(list)
    for relation, target in targets:
        for kind in relation.READS:
            routes[kind].append(target)
    return dict(routes)


def views(record: dict[str, Any], kind: str, reads_snapshots: bool, reads_states: bool
          ) -> Iterator[tuple[str, dict[str, Any]]]:
    """The (kind, record) pairs that ``record`` gives collectors: a snapshot record as it is to
    the relations that read snapshots and expanded, one ``state`` record per variable, to those
    that read state records; a ``state`` record (a schema-1 trace) as it is to the latter and as
    a one-variable snapshot to the former; any other record as it is."""
    if kind == KIND_SNAPSHOT:
        if reads_snapshots:
            yield kind, record
        if reads_states:
            for state in expand(record):
                yield KIND_STATE, state
    elif kind == KIND_STATE:
        if reads_snapshots:
            yield KIND_SNAPSHOT, from_state(record)
        if reads_states:
            yield kind, record
    else:
        yield kind, record


def collect_all(relations: Iterable[ModuleType], paths: Iterable[str | Path]) -> dict[str, Groups]:
    """The example groups of every relation, from one pass over each trace under ``paths``
    (in order of file name, then path: the examples' order does not depend on where the traces
    lie)."""
    from traincheck_agent.trace.reader import TraceFile, find_trace_files

    relations = list(relations)
    out: dict[str, Groups] = {r.RELATION: defaultdict(list) for r in relations}
    for path in sorted(find_trace_files(paths), key=lambda p: (p.name, str(p))):
        trace = TraceFile(path)
        source = TraceSource.of(trace)
        collectors = [(r.key_of, out[r.RELATION], r.Collector(source)) for r in relations]
        routes = route_by_kind(zip(relations, collectors, strict=True))
        reads = (KIND_SNAPSHOT in routes, KIND_STATE in routes)
        for raw in trace.records(expand_snapshots=False):
            for kind, record in views(raw, raw.get("kind", ""), *reads):
                for key_of, groups, collector in routes.get(kind, ()):
                    for example in collector.feed(record):
                        groups[key_of(example)].append(example)
        for key_of, groups, collector in collectors:
            for example in collector.finish():
                groups[key_of(example)].append(example)
    for r in relations:
        finalize = getattr(r, "finalize", None)
        if finalize is not None:
            out[r.RELATION] = finalize(out[r.RELATION])
    return out


def collect(relation: ModuleType, paths: Iterable[str | Path]) -> Groups:
    """The example groups of one relation."""
    return collect_all([relation], paths)[relation.RELATION]


def check(relation: ModuleType, invariant: Any, groups: Groups, coverage: Any = None) -> list[Any]:
    """The examples of ``groups`` that violate ``invariant`` inside its domain (those outside it
    are counted in ``coverage``, a ``coverage.Coverage``, when given)."""
    from traincheck_agent.inference.coverage import violations_of

    return [e for e in groups.get(relation.invariant_key(invariant), [])
            if any(True for _ in violations_of(relation, (invariant,), e, coverage))]
