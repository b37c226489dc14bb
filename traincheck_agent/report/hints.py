"""Hints: the usual cause of a broken invariant, in plain words, kept as data.

Each entry is keyed by the relation, a pattern over the API or event the invariant is about,
and a pattern over what the invariant says of it (its *what*: the subject's attribute, effect,
form, property or argument, joined by ``:``; ``grad:finds_none_or_zero`` for "backward finds the
grad None or zero"). An entry gives two texts:

- ``happened``: what went wrong, as the start of a sentence ("backward found grads left over
  from an earlier step"), used where a person reads the violation first;
- ``hint``: the usual cause, as a question. It is shown labelled ``hint:``, never as a verdict:
  the invariant broke, the cause is a guess;
- ``cause``: a short name of that usual cause. Groups of other invariants with the same cause,
  broken over the same steps, are most likely one fault seen twice (a forgotten ``zero_grad``
  leaves stale grads *and* breaks the call order), and are shown together.

Only cases whose cause is usually clear have an entry: a wrong hint sends a person the wrong
way, so a case that is not listed gets none. Patterns are ``fnmatch`` patterns; the first entry
that matches wins, so specific entries come before general ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

# The subject fields that say *what* an invariant claims of its API / event, in this order.
WHAT_FIELDS = ("attribute", "effect", "form", "property", "argument")


@dataclass(frozen=True)
class Hint:
    relation: str
    api: str  # fnmatch pattern over the subject's API or event
    what: str  # fnmatch pattern over ``what_of(subject)``
    happened: str
    hint: str
    cause: str


HINTS: tuple[Hint, ...] = (
    Hint("StateTransition", "backward", "grad:finds_none_or_zero",
         "backward found grads left over from an earlier step",
         "grads were not cleared before backward: is `optimizer.zero_grad()` called every step?",
         "grads not cleared"),
    Hint("StateTransition", "backward", "grad:becomes_nonzero",
         "backward left grads zero or None",
         "did the loss lose its graph to these parameters (a `.detach()`, `torch.no_grad()`, "
         "or a loss that does not use them)?",
         "graph lost"),
    Hint("StateTransition", "zero_grad", "grad:*",
         "zero_grad left grads non-zero",
         "does the optimizer whose `zero_grad()` is called hold these parameters?",
         "zero_grad on another optimizer"),
    Hint("StateTransition", "optimizer.step", "data:changed",
         "optimizer.step left parameters unchanged",
         "is the learning rate zero, or did the grad reach the step as zero?",
         "no update"),
    Hint("StateTransition", "*", "*:stays_finite",
         "NaN or Inf appeared",
         "is the learning rate too high, or does the loss divide by zero or take the log of zero? "
         "With float16, is a GradScaler used?",
         "non-finite values"),
    Hint("APISequence", "*zero_grad", "covers",
         "no `zero_grad()` call between two optimizer steps",
         "grads were not cleared between two steps: is `optimizer.zero_grad()` called every step?",
         "grads not cleared"),
    Hint("GradApplied", "*", "data:applies_every_grad",
         "parameters with a grad were never changed by an optimizer step",
         "are they in the optimizer (one built over other parameters, or a param group left out)?",
         "parameter not in optimizer"),
    Hint("GradApplied", "*", "grad:receives_every_grad",
         "the optimizer step received zero grads where backward gave non-zero ones",
         "are grads clipped with max_norm=0, or cleared between backward and the step?",
         "grads zeroed before step"),
    Hint("GradCleared", "*", "grad:cleared_between_steps",
         "optimizer steps applied grads that were never cleared since the previous step",
         "grads were not cleared between two steps: is `optimizer.zero_grad()` called every step?",
         "grads not cleared"),
    Hint("CrossRankConsistent", "*", "*",
         "replicas differ across ranks",
         "were DDP's hooks lost, or is clipping applied on one rank only?",
         "replicas diverged"),
    Hint("CrossRankValue", "*", "*:distinct",
         "ranks got the same values where each should get its own",
         "is a `DistributedSampler` used (with `set_epoch()` each epoch), so that each rank loads its own data?",
         "same data on every rank"),
    Hint("UpdateMode", "*", "*",
         "an optimizer step ran outside training mode",
         "is `model.train()` called again after evaluation?",
         "left in eval mode"),
    Hint("ContextArgument", "*", "training",
         "a call got another training flag than the phase it ran in",
         "is the model still in eval mode (`model.train()` not called after evaluation), "
         "or is `training=` hard-coded?",
         "left in eval mode"),
    Hint("AutocastRegion", "*", "*",
         "a module ran outside the autocast region its step used",
         "is this module called outside the `torch.autocast` block, or does it turn autocast off?",
         "outside autocast"),
    Hint("VarPeriodicChange", "*", "lr",
         "the learning rate left its schedule",
         "is `scheduler.step()` called once per optimizer step?",
         "scheduler cadence"),
    Hint("DistinctArgument", "*", "*",
         "a parameter was given to the same call twice in one step",
         "is a layer initialised twice (in its constructor and again by `model.apply`), or a "
         "parameter listed twice in the optimizer?",
         "double init"),
)


def what_of(subject: Mapping[str, Any]) -> str:
    """What an invariant claims of its API / event, from its subject: ``grad:finds_none_or_zero``."""
    return ":".join(str(subject[f]) for f in WHAT_FIELDS if isinstance(subject.get(f), (str, int)))


def find_hint(relation: str, api: str, what: str, table: tuple[Hint, ...] = HINTS) -> Hint | None:
    """The first entry of ``table`` for ``relation`` whose patterns match ``api`` and ``what``;
    None when the cause is not clear enough to guess."""
    for entry in table:
        if entry.relation == relation and fnmatchcase(api, entry.api) and fnmatchcase(what, entry.what):
            return entry
    return None


def subject_of(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """The invariant's subject a violation record carries in its evidence ({} without one)."""
    evidence = record.get("evidence")
    subject = evidence.get("subject") if isinstance(evidence, Mapping) else None
    return subject if isinstance(subject, Mapping) else {}


def api_of(record: Mapping[str, Any], subject: Mapping[str, Any]) -> str:
    """The API or event the invariant is about: the subject's event or API, else the record's API."""
    for key in ("event", "api"):
        if isinstance(subject.get(key), str) and subject[key]:
            return str(subject[key])
    return str(record.get("api") or "")


def hint_for_record(record: Mapping[str, Any]) -> Hint | None:
    """The hint for one violation record (None when its cause is not clear)."""
    subject = subject_of(record)
    return find_hint(str(record.get("relation") or ""), api_of(record, subject), what_of(subject))


__all__ = ["HINTS", "WHAT_FIELDS", "Hint", "api_of", "find_hint", "hint_for_record", "subject_of",
           "what_of"]
