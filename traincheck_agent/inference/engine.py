"""Run every relation over a set of traces: the invariants that hold in all of them.

Every relation module implements the streaming interface of ``inference.stream``; each trace
is read once, its records fed to every relation's collector. Examples of all the given traces
are merged before any hypothesis is judged, so an invariant that one clean reference breaks is
not emitted.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from traincheck_agent.inference import relations
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.stream import Collector, collect_all
from traincheck_agent.trace.reader import (
    Progress,
    TraceFile,
    find_trace_files,
    reading_with_progress,
)
from traincheck_agent.trace.schema import KIND_CALL, KIND_SNAPSHOT

RELATIONS = tuple(relations.load())


class _StepCounter(Collector):
    """The training steps one trace shows: its one example is (trace label, step count)."""

    def __init__(self, source: Any) -> None:
        super().__init__(source)
        self.last = -1

    def feed(self, record: dict[str, Any]) -> tuple[()]:
        step = record.get("step")
        if isinstance(step, int) and step > self.last:
            self.last = step
        return ()

    def finish(self) -> list[tuple[str, int]]:
        return [(self.source.label, self.last + 1)]


# Read along with the relations, in the same pass over each trace (typed Any: read like a
# relation module).
STEP_COUNT: Any = SimpleNamespace(RELATION="steps shown", READS=(KIND_CALL, KIND_SNAPSHOT), Collector=_StepCounter,
                                  key_of=lambda example: example[0])


@dataclass
class InferenceFacts:
    """What inference saw besides its invariants: the training steps of each trace (by file
    name), and each relation's examples and invariants, so that the user can be told why a
    relation learned nothing."""

    steps: dict[str, int] = field(default_factory=dict)
    examples: dict[str, int] = field(default_factory=dict)
    learned: dict[str, int] = field(default_factory=dict)

    def short_traces(self, fewest: int = 2) -> dict[str, int]:
        """The traces that show fewer than ``fewest`` training steps."""
        return {label: n for label, n in sorted(self.steps.items()) if n < fewest}

    def nothing_learned(self) -> list[tuple[str, str]]:
        """(relation, why) for each relation that found no invariant, in inference order."""
        out = []
        for relation in RELATIONS:
            name = relation.RELATION
            if self.learned.get(name, 0):
                continue
            seen = self.examples.get(name, 0)
            why = (f"no examples: it needs {relation.LEARNS_FROM}" if seen == 0 else
                   f"{seen} examples, but no hypothesis held in every reference with enough support")
            out.append((name, why))
        return out


@dataclass
class Learned:
    """What one inference pass produced: the invariants, the trace files read (in reading
    order), and every relation's example groups (``inference.stream``), by relation name."""

    invariants: list[Invariant]
    files: list[Path]
    examples: dict[str, Any]


def infer_invariants(paths: Iterable[str | Path], progress: Progress | None = None,
                     ranks: Collection[int] | None = None, facts: InferenceFacts | None = None
                     ) -> tuple[list[Invariant], list[Path]]:
    """The invariants that hold in every trace under ``paths``, and the trace files read;
    ``ranks``: only the traces of those ranks (cross-rank invariants are learned among them);
    ``facts``, when given, is filled with what else inference saw."""
    learned = learn(paths, progress, ranks, facts)
    return learned.invariants, learned.files


def learn(paths: Iterable[str | Path], progress: Progress | None = None,
          ranks: Collection[int] | None = None, facts: InferenceFacts | None = None) -> Learned:
    """``infer_invariants``, keeping the examples (to explain what changed in an update).

    Traces are read in order of file name (then path), so the result does not depend on the
    directories they lie in: learning from the same traces gives the same file wherever they
    were copied."""
    files = sorted(find_trace_files(paths), key=lambda p: (p.name, str(p)))
    if ranks is not None:
        wanted = set(ranks)
        files = [f for f in files if TraceFile(f).header.get("rank") in wanted]
    sources = tuple(sorted(p.name for p in files))
    readers = RELATIONS if facts is None else (*RELATIONS, STEP_COUNT)
    with reading_with_progress(files, progress):
        examples = collect_all(readers, files)
    invariants: list[Invariant] = []
    for relation in RELATIONS:
        if facts is not None:
            facts.examples[relation.RELATION] = sum(map(len, examples[relation.RELATION].values()))
        found = relation.infer(examples[relation.RELATION], sources)
        invariants += found
        if facts is not None:
            facts.learned[relation.RELATION] = len(found)
    if facts is not None:
        facts.steps = {str(label): counts[0][1] for label, counts in examples[STEP_COUNT.RELATION].items()}
    return Learned(sorted(invariants, key=lambda i: i.id), files, examples)
