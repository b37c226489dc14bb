"""Learning from one more clean run: ``traincheck infer --update``.

An update re-learns over the old references and the new ones together, exactly as a fresh
``traincheck infer`` over all of them would (one pass over each trace; the result is the same
file), so it inherits inference's monotone merging: an invariant one reference supports keeps
holding on that reference's contexts unless a new reference breaks it where no precondition
can tell the two apart. What an update adds is the account of what changed and why.

An old invariant is matched with the new ones by its *form*: relation and subject. Kinds of
change:

* ``removed``: no new invariant has its form, or the only ones left are other old forms;
* ``narrowed``: its form survives with another precondition (or is split into scopes), and a
  new reference's example broke the old precondition; or its domain lost a value;
* ``widened``: its domain grew, or its form survives with another precondition that no example
  broke (the new references showed it holding where the old precondition did not reach);
* ``added``: a new form, or a new scope of a form whose old invariants all survived.

A removed or narrowed invariant is explained by the first example, preferring the new
references' examples, that breaks its old form (precondition included, domain ignored: an
example outside the old domain can still be what forced the change).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traincheck_agent.inference import relations
from traincheck_agent.inference.engine import InferenceFacts, Learned, learn
from traincheck_agent.inference.invariant import Invariant, InvariantsFile, read_invariants_file
from traincheck_agent.inference.preconditions import with_condition
from traincheck_agent.inference.references import FIX, ReferenceTraceError, locate
from traincheck_agent.trace.reader import Progress, TraceFile, find_trace_files

REMOVED, NARROWED, WIDENED, ADDED = "removed", "narrowed", "widened", "added"
CHANGE_KINDS = (REMOVED, NARROWED, WIDENED, ADDED)
MAX_NAMES_SHOWN = 5


@dataclass(frozen=True)
class Counterexample:
    """The example that broke an old invariant, briefly."""

    trace: str
    step: Any
    subject: str  # the variable or API it is about
    what: str  # what happened, in the relation's words

    def to_json(self) -> dict[str, Any]:
        return {"trace": self.trace, "step": self.step, "subject": self.subject, "what": self.what}


@dataclass(frozen=True)
class Change:
    """One changed invariant: ``old`` (None when added) and the new invariants of its form
    that replace or extend it; ``detail`` says what changed (a domain, a precondition)."""

    kind: str
    old: Invariant | None
    new: tuple[Invariant, ...]
    detail: str
    counterexample: Counterexample | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.old is not None:
            out["old"] = {"id": self.old.id, "relation": self.old.relation, "description": self.old.description}
        out["new"] = [{"id": n.id, "relation": n.relation, "description": n.description} for n in self.new]
        out["detail"] = self.detail
        if self.counterexample is not None:
            out["counterexample"] = self.counterexample.to_json()
        return out


@dataclass
class Update:
    """The result of an update: what was learned, from which traces, and what changed."""

    learned: Learned
    old: InvariantsFile
    old_files: list[Path]
    new_files: list[Path]
    changes: list[Change]


def old_reference_files(invariants_path: Path, old: InvariantsFile, given: Iterable[str | Path] | None) -> list[Path]:
    """The old references: ``given`` when the user names them, else those the file records,
    each checked to be the trace it was learned from (ReferenceTraceError otherwise)."""
    if given is not None:
        return find_trace_files(given)
    if old.references is None:
        names = ", ".join(old.sources[:MAX_NAMES_SHOWN]) + (", ..." if len(old.sources) > MAX_NAMES_SHOWN else "")
        learned_from = f" (it names {len(old.sources)}: {names})" if old.sources else ""
        raise ReferenceTraceError(f"{invariants_path} does not record where its reference traces are "
                                  f"(written before invariants files did){learned_from}; {FIX}")
    return locate(old.references, invariants_path)


def update_invariants(invariants_path: str | Path, new_files: Iterable[Path], references: Iterable[str | Path] | None = None,
                      ranks: Collection[int] | None = None, progress: Progress | None = None,
                      facts: InferenceFacts | None = None) -> Update:
    """Re-learn the invariants of ``invariants_path`` over its references plus ``new_files``
    (``references``: the old references, when not those the file records; ``ranks``: only the
    new traces of those ranks). Raises InvariantFileError for a bad invariants file and
    ReferenceTraceError for an old reference that is missing or changed."""
    invariants_path = Path(invariants_path)
    old = read_invariants_file(invariants_path)
    old_files = old_reference_files(invariants_path, old, references)
    known = {f.resolve() for f in old_files}
    fresh = [f for f in new_files if f.resolve() not in known]  # a trace given twice counts once
    if ranks is not None:
        wanted = set(ranks)
        fresh = [f for f in fresh if TraceFile(f).header.get("rank") in wanted]
    learned = learn([*old_files, *fresh], progress, facts=facts)
    new_runs = {str(TraceFile(f).header.get("run_id")) for f in fresh}
    changes = compare(old.invariants, learned.invariants, learned.examples, {f.name for f in fresh}, new_runs)
    return Update(learned, old, old_files, fresh, changes)


def _form(invariant: Invariant) -> tuple[str, str]:
    return invariant.relation, json.dumps(invariant.subject, sort_keys=True, default=str)


def compare(old: list[Invariant], new: list[Invariant], examples: dict[str, Any],
            new_traces: Collection[str] = (), new_runs: Collection[str] = ()) -> list[Change]:
    """The changes from ``old`` to ``new`` (see the module docstring), removed first, then
    narrowed, widened and added, each kind in order of id; ``examples`` (by relation) explain
    them, preferring those of the traces named ``new_traces`` or of the runs ``new_runs``."""
    old_ids = {inv.id for inv in old}
    new_by_id = {inv.id: inv for inv in new}
    fresh_by_form: dict[tuple[str, str], list[Invariant]] = {}
    for inv in new:
        if inv.id not in old_ids:
            fresh_by_form.setdefault(_form(inv), []).append(inv)
    changes: list[Change] = []
    claimed: set[str] = set()
    for inv in sorted(old, key=lambda i: i.id):
        same = new_by_id.get(inv.id)
        if same is not None:
            change = _domain_change(inv, same)
            if change is not None:
                changes.append(change)
            continue
        successors = tuple(fresh_by_form.get(_form(inv), ()))
        claimed.update(s.id for s in successors)
        found = counterexample(inv, examples, new_traces, new_runs)
        if not successors:
            detail = ("broken, and no precondition separates the breaking examples" if found is not None else
                      "no example breaks it, but it is not learned over all the references together "
                      "(a competing form or a disagreement between references)")
            changes.append(Change(REMOVED, inv, (), detail, found))
        elif found is not None:
            changes.append(Change(NARROWED, inv, successors, _now(successors), found))  # scoped away from it
        else:
            detail = "no example breaks its precondition; re-deduced to admit the new passing examples: "
            changes.append(Change(WIDENED, inv, successors, detail + _now(successors)))
    for inv in new:
        if inv.id not in old_ids and inv.id not in claimed:
            changes.append(Change(ADDED, None, (inv,), "new"))
    order = {kind: i for i, kind in enumerate(CHANGE_KINDS)}
    return sorted(changes, key=lambda c: (order[c.kind], (c.old or c.new[0]).id))


def _now(successors: tuple[Invariant, ...]) -> str:
    """The preconditions the form holds under now, in words."""
    texts = [with_condition("", s.precondition).removeprefix(", ") or "always" for s in successors]
    return "now " + "; or ".join(texts)


def _domain_change(old: Invariant, new: Invariant) -> Change | None:
    """The change of an invariant kept with the same id: its domain lost or gained values."""
    lost, gained = [], []
    for name in sorted(set(old.domain) | set(new.domain)):
        before, after = old.domain.get(name), new.domain.get(name)
        if after is None:  # no longer restricted
            gained.append(f"{name} any value")
            continue
        if before is None:
            lost.append(f"{name} only {_values(after)}")
            continue
        if [v for v in before if v not in after]:
            lost.append(f"{name} lost {_values([v for v in before if v not in after])}")
        if [v for v in after if v not in before]:
            gained.append(f"{name} + {_values([v for v in after if v not in before])}")
    if lost:
        return Change(NARROWED, old, (new,), "domain: " + "; ".join(lost + gained))
    if gained:
        return Change(WIDENED, old, (new,), "domain: " + "; ".join(gained))
    return None


def _values(values: list[Any]) -> str:
    return ", ".join("null" if v is None else str(v) for v in values)


def counterexample(invariant: Invariant, examples: dict[str, Any], new_traces: Collection[str] = (),
                   new_runs: Collection[str] = ()) -> Counterexample | None:
    """The first example that breaks ``invariant`` (precondition included, domain ignored, and
    examples its relation says are none of its business skipped), one of the new references'
    when there is one; None when no example breaks it."""
    relation = relations.module(invariant.relation)
    if relation is None:
        return None
    group = examples.get(invariant.relation, {}).get(relation.invariant_key(invariant), [])
    outside = getattr(relation, "outside", None)
    first = None
    for example in group:
        if outside is not None and outside(invariant, example) is not None:
            continue
        if not relation.violates(invariant, example):
            continue
        if getattr(example, "trace", None) in new_traces or getattr(example, "run", None) in new_runs:
            return _brief(relation, invariant, example)
        if first is None:
            first = example
    return None if first is None else _brief(relation, invariant, first)


def _brief(relation: Any, invariant: Invariant, example: Any) -> Counterexample:
    found = relation.violation(invariant, example)
    message = str(found.get("message", ""))
    what = message.removeprefix(f"{invariant.description}: ")
    trace = found.get("trace") or getattr(example, "trace", None) or f"run {getattr(example, 'run', '?')}"
    subject = found.get("variable") or found.get("api") or ""
    return Counterexample(str(trace), found.get("step"), str(subject), what)
