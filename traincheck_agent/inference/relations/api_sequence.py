"""APISequence: the order of API calls in a training loop.

Two forms, both about framework semantics rather than the order of incidental helpers:

* ``covers``: between two consecutive optimizer steps the training loop calls API A, e.g.
  ``zero_grad`` (or a forward, a backward) in every iteration. Only outermost calls count (the
  ones the training loop makes itself); the interval of step ``s`` holds the outermost calls
  whose ``step`` field is ``s``, and it ends with the call that advanced the step (the last one
  recorded with ``s``: the clock moves when that call returns). An optimizer step given a
  closure (``ctx.closure``: PyTorch Lightning, L-BFGS) runs the iteration's work inside it: the
  calls its closure makes directly (the step's direct children) are the loop's calls of its
  interval. The first interval of a run is not an example: before the first step nothing had to
  be undone.
* ``leads``: the first call of an API with a boolean flag set one way precedes its first call
  with the flag set the other way, per receiver module, e.g. ``compute_weight(module,
  do_power_iteration=True)`` before ``do_power_iteration=False`` (spectral norm evaluated before
  its power iteration ever ran), or ``F.batch_norm(training=True)`` before ``training=False``
  (running statistics used before they were ever updated).

A hypothesis is emitted only when every example in every reference holds; there is no
precondition to deduce (the first interval and the receiver already scope the examples).

Applicability (``outside``): a ``covers`` invariant speaks of programs that have what its API
is called on. For a method, that is an object of a class its references called it on (their
``subject.receivers``: ``MLP``, ``Adam``); for a function, the function itself, called at least
once. An interval of a program that has not had it so far (a GRU model has no ``MLP``, a loop
that slices tensors by hand no ``DataLoader`` iterator) is not covered; a program that uses an
``Adam`` and never calls its ``zero_grad`` is judged. An interval that misses a framework API but
calls the framework's method of the same name on another class (``model.zero_grad()`` where the
references called ``optimizer.zero_grad()``) does the same work another way: it is not covered
either. Module forwards are never taken for one another: which model runs is the program's.
A ``leads`` invariant speaks of programs that train: its first sightings wait until
the program trains (a backward, or a step completed), and those of a program that never trains
(an inference script evaluating without ever training) are not covered.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from traincheck_agent.inference.call_context import MODE_SETTERS
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.relations import Needs
from traincheck_agent.inference.stream import Collector as StreamCollector
from traincheck_agent.inference.stream import TraceSource
from traincheck_agent.policy.model import DESCRIBE_NONE, DESCRIBE_SUMMARY
from traincheck_agent.trace.schema import KIND_CALL

RELATION = "APISequence"
LEARNS_FROM = "API calls in two or more training steps"  # what its examples come from: said when it learns nothing
ID_PREFIX = "as"  # of its invariants' ids
SUBJECT_FIELDS = ("form", "api")  # the subject fields it reads when it checks
TRIAGE_KIND = "ordering"  # how triage ranks its violations (``relations.TRIAGE_KINDS``)
READS = (KIND_CALL,)  # the record kinds its collector reads
FRAMEWORK = ("torch.", "deepspeed.", "accelerate.", "transformers.")  # whose same-named methods do the same work
MIN_INTERVALS = 5
MIN_LEADS = 2


class Interval(NamedTuple):
    """The outermost calls between the step call of ``step - 1`` and that of ``step`` (with the
    class of each one's receiver), and what the program had used by then: every API called
    (``api:<name>``) and every class a method was called on (``type:<name>``)."""

    trace: str
    step: int
    step_api: str
    apis: frozenset[str]
    seen: frozenset[str] = frozenset()
    receivers: frozenset[tuple[str, str]] = frozenset()


class FirstSighting(NamedTuple):
    """The first call of ``api`` with ``flag = value`` on one receiver, and whether the flag's
    other value had been seen on that receiver before it."""

    trace: str
    api: str
    flag: str
    receiver: str
    value: bool
    other_seen_before: bool
    step: int
    trains: bool = True  # the program went on to train


def _trains(api: str, step: int) -> bool:
    """Whether a call shows the program training: a backward, or a step already completed."""
    return step >= 1 or api.endswith(".backward")


def _receiver(args: dict[str, Any]) -> str:
    """The name of the module a call works on (``self`` or a module argument), or ""."""
    for desc in args.values():
        if isinstance(desc, dict) and isinstance(desc.get("training"), bool) and "name" in desc:
            return str(desc["name"])
    return ""


class Collector(StreamCollector):
    """Intervals complete when the first outermost call of the next step arrives; the first
    interval of the trace is not an example (before the first step nothing had to be undone).
    Flag sightings are examples the moment they happen."""

    def __init__(self, source: TraceSource) -> None:
        super().__init__(source)
        self.step: int | None = None
        self.apis: set[str] = set()
        self.last_api = ""
        self.first_interval = True
        self.seen: set[tuple[str, str, str, bool]] = set()
        self.receivers: set[tuple[str, str]] = set()  # (API, receiver class) of this interval's calls
        self.used: set[str] = set()  # every API called, every receiver class
        self.frozen_used: frozenset[str] = frozenset()  # ``used``, rebuilt only when it grows
        self.trains = False
        self.waiting: list[FirstSighting] = []  # first sightings until the program trains
        # Per thread, the direct children of each open call, as (API, receiver class): a call is
        # recorded when it returns, so before its caller, and a step with a closure hands its
        # children to the interval. Dropped when the thread's outermost call returns.
        self.children: dict[Any, dict[Any, set[tuple[str, str | None]]]] = {}

    def feed(self, record: dict[str, Any]) -> list[Interval | FirstSighting]:
        if record.get("kind") != KIND_CALL:
            return []
        api, step = str(record.get("api")), int(record.get("step", -1))
        out: list[Interval | FirstSighting] = []
        args = record.get("args") or {}
        self_desc = args.get("self")
        receiver_type = self_desc.get("t") if isinstance(self_desc, dict) else None
        for label in (f"api:{api}", f"type:{receiver_type}" if isinstance(receiver_type, str) else None):
            if label is not None and label not in self.used:
                self.used.add(label)
                self.frozen_used = frozenset(self.used)
        for name, value in args.items() if api not in MODE_SETTERS else ():
            if isinstance(value, bool):
                key = (api, name, _receiver(args))
                if (*key, value) not in self.seen:
                    self.seen.add((*key, value))
                    self.waiting.append(FirstSighting(self.source.label, api, name, key[2], value,
                                                      (*key, not value) in self.seen, step))
        if not self.trains and _trains(api, step):
            self.trains = True
        if self.trains and self.waiting:
            out += self.waiting
            self.waiting = []
        parent = record.get("parent")
        if parent is not None:
            open_calls = self.children.setdefault(record.get("thread"), {})
            open_calls.pop(record.get("id"), None)
            open_calls.setdefault(parent, set()).add((api, receiver_type if isinstance(receiver_type, str) else None))
            return out
        open_calls = self.children.pop(record.get("thread"), {})
        if step >= 0:
            if self.step is not None and step == self.step + 1:
                if not self.first_interval:
                    out.append(Interval(self.source.label, self.step, self.last_api, frozenset(self.apis),
                                        self.frozen_used, frozenset(self.receivers)))
                self.first_interval = False
            if step != self.step:
                self.step, self.apis, self.receivers = step, set(), set()
            made = open_calls.get(record.get("id"), ()) if (record.get("ctx") or {}).get("closure") else ()
            for call_api, call_receiver in ((api, receiver_type), *made):
                self.apis.add(call_api)
                if isinstance(call_receiver, str):
                    self.receivers.add((call_api, call_receiver))
            self.last_api = api
        return out

    def finish(self) -> list[FirstSighting]:
        """Sightings of a program that never trained: examples, marked so."""
        out = [s._replace(trains=False) for s in self.waiting]
        self.waiting = []
        return out


def key_of(example: Interval | FirstSighting) -> tuple[str, ...]:
    if isinstance(example, Interval):
        return ("covers", example.step_api)
    return ("leads", example.api, example.flag)


def invariant_key(invariant: Invariant) -> tuple[str, ...]:
    s = invariant.subject
    return ("covers", s["between"]) if s["form"] == "covers" else ("leads", s["api"], s["flag"])


def _infer_covers(step_api: str, intervals: list[Interval], sources: tuple[str, ...]) -> list[Invariant]:
    if len(intervals) < MIN_INTERVALS:
        return []
    common = frozenset.intersection(*(i.apis for i in intervals)) - {step_api}
    receivers: dict[str, set[str]] = {}
    for interval in intervals:
        for api, receiver_type in interval.receivers:
            receivers.setdefault(api, set()).add(receiver_type)
    return [Invariant(
        relation=RELATION,
        subject={"form": "covers", "api": api, "between": step_api}
        | ({"receivers": sorted(receivers[api])} if api in receivers else {}),
        precondition=(),
        support={"passing": len(intervals), "traces": len({i.trace for i in intervals})},
        description=f"{api} is called between two consecutive {step_api} calls",
        sources=sources,
    ) for api in sorted(common)]


def _infer_leads(api: str, flag: str, sightings: list[FirstSighting], sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for value in (True, False):
        later = [s for s in sightings if s.value is not value]  # first sightings of the other value
        if len(later) < MIN_LEADS or not all(s.other_seen_before for s in later):
            continue
        invariants.append(Invariant(
            relation=RELATION,
            subject={"form": "leads", "api": api, "flag": flag, "first": value},
            precondition=(),
            support={"passing": len(later), "traces": len({s.trace for s in later})},
            description=f"{api} is first called with {flag}={value} before any call with {flag}={not value}",
            sources=sources,
        ))
    return invariants


def infer(groups: dict[tuple[str, ...], list[Any]], sources: tuple[str, ...]) -> list[Invariant]:
    invariants: list[Invariant] = []
    for key, group in sorted(groups.items()):
        if key[0] == "covers":
            invariants += _infer_covers(key[1], group, sources)
        else:
            invariants += _infer_leads(key[1], key[2], group, sources)
    return invariants


def outside(invariant: Invariant, ex: Interval | FirstSighting) -> str | None:
    """Why the example is not the invariant's business, or None (see the module docstring)."""
    if isinstance(ex, Interval):
        api, types = invariant.subject["api"], invariant.subject.get("receivers")
        if isinstance(types, list) and types:
            if not any(f"type:{t}" in ex.seen for t in types):
                return f"no {' / '.join(map(str, types))} object in this run"
        elif f"api:{api}" not in ex.seen:
            return "a program that never calls it"
        if api not in ex.apis and api.startswith(FRAMEWORK) and not api.endswith(".forward"):
            method = _method(api)
            for other in ex.apis:
                if other.startswith(FRAMEWORK) and _method(other) == method:
                    return f"{method} called as {other}"
        return None
    return None if ex.trains else "a program that never trains"


def _method(api: str) -> str:
    """The last part of an API name: ``zero_grad`` of ``torch.nn.Module.zero_grad``."""
    return api.rpartition(".")[2]


def violates(invariant: Invariant, ex: Interval | FirstSighting) -> bool:
    s = invariant.subject
    if isinstance(ex, Interval):
        return s["api"] not in ex.apis
    return ex.value is not s["first"] and not ex.other_seen_before


def violation(invariant: Invariant, ex: Interval | FirstSighting) -> dict[str, Any]:
    if isinstance(ex, Interval):
        return {"step": ex.step, "api": invariant.subject["api"], "variable": "", "trace": ex.trace,
                "message": f"{invariant.description}: no {invariant.subject['api']} call before "
                           f"the {ex.step_api} call of step {ex.step}"}
    where = f" on {ex.receiver}" if ex.receiver else ""
    return {"step": ex.step, "api": ex.api, "variable": ex.receiver, "trace": ex.trace,
            "message": f"{invariant.description}: called with {ex.flag}={ex.value}{where} at step {ex.step} "
                       f"before any call with {ex.flag}={not ex.value}"}


def needs(req: Needs, inv: Invariant) -> None:
    """Its API's calls (the flag and the receiver module); for the ``between`` form the other
    API's too: the receivers' classes tell whether the program has what it speaks of."""
    subject = inv.subject
    req.need_call(subject["api"], DESCRIBE_SUMMARY, DESCRIBE_NONE)
    if subject.get("form") != "leads":
        req.need_call(subject["between"], DESCRIBE_SUMMARY, DESCRIBE_NONE)
