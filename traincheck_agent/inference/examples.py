"""Examples of state transitions, read from traces.

A state snapshot taken ``before:<event>`` and one taken ``after:<event>`` of the same call and
the same variable make one example of what that event does to the variable. Traces are
streamed: only the pending ``before`` half of each pair is held until its ``after`` arrives.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from traincheck_agent.inference.stream import SnapshotCollector, TraceSource
from traincheck_agent.trace.schema import CLOSURE_CALLS
from traincheck_agent.trace.snapshot import blocks_of, variables

# Attributes whose values are fingerprints (or None).
TENSOR_ATTRS = ("data", "grad")
# Attributes describing the variable, usable in preconditions.
DESCRIPTIVE_ATTRS = ("dtype", "requires_grad", "tensor_model_parallel", "partition_dim", "sequence_parallel", "shared")

NONE, ZERO, NONFINITE, NONZERO = "none", "zero", "nonfinite", "nonzero"

# Machine epsilon of the float formats parameters are kept in.
_EPSILON = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
# A gradient this many epsilons below the data's magnitude moves no element of it under
# plain SGD with lr <= 1 (the measured case: a conv bias feeding BatchNorm, whose gradient is
# rounding noise ~1e-7 of its values), so "the step left it unchanged" says nothing.
NEGLIGIBLE_EPSILONS = 64


NO_FINGERPRINT = "no fingerprint"  # why an example about a tensor the agent could not hash is undecided


def unfingerprinted(fingerprint: Any) -> bool:
    """Whether a recorded fingerprint is the marker of a tensor the agent could not hash
    (``nostorage:``, ``meta:``, ...: nothing after the colon, both flags False). Markers are
    equal whatever the contents, so they say neither that a value changed nor what it holds."""
    return isinstance(fingerprint, dict) and marker_hash(fingerprint.get("h"))


def marker_hash(h: Any) -> bool:
    """Whether a recorded hash is an unfingerprinted tensor's marker (see ``unfingerprinted``)."""
    return isinstance(h, str) and h.endswith(":")


def param_features(vtype: Any, phase: Any, attrs: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """What a parameter's snapshot says of it that a precondition may read: its kind, the
    phase, and the descriptive attributes it carries."""
    out = {"vtype": vtype, "phase": phase}
    out.update((name, attrs[name]) for name in DESCRIPTIVE_ATTRS if name in attrs)
    return tuple(sorted(out.items()))


def value_class(fingerprint: dict[str, Any] | None) -> str:
    """The symbolic class of a tensor value: none, zero, nonfinite or nonzero."""
    if fingerprint is None:
        return NONE
    if fingerprint.get("nonfinite"):
        return NONFINITE
    if fingerprint.get("zero"):
        return ZERO
    return NONZERO


class TransitionExample(NamedTuple):
    """What one call of ``event`` did to one attribute of one variable. A named tuple, like
    every example a collector makes per record: a checker makes dozens per training step."""

    event: str
    attribute: str
    before_hash: str | None
    after_hash: str | None
    before_class: str
    after_class: str
    features: tuple[tuple[str, Any], ...]  # known before the call: what preconditions may use
    trace: str
    step: int
    var: str
    # The gradient before the call was below the data's float resolution, so an update may
    # legitimately round away (known only where fingerprints carry magnitudes).
    update_negligible: bool = False
    # The variable's grad after its previous backward in this run was zero or rounding noise next
    # to its data (a bias feeding BatchNorm or a softmax, whose grad is zero up to rounding): an
    # exact zero now says nothing about backward.
    rounding_grad: bool = False
    # Both values were fingerprinted (or absent): the example can tell what the call did.
    fingerprinted: bool = True

    @property
    def changed(self) -> bool:
        return self.before_hash != self.after_hash

    def feature_map(self) -> dict[str, Any]:  # FeatureExample's: a NamedTuple cannot inherit it
        return dict(self.features)


def _features(vtype: Any, phase: Any, step: Any, attrs: dict[str, Any], before_classes: dict[str, str],
              first_in_step: bool) -> tuple[tuple[str, Any], ...]:
    out: dict[str, Any] = {
        "vtype": vtype,
        "phase": phase,
        "first_step": step == 0,
        # The first call of this event for this variable in the step (a second backward in a
        # step is gradient accumulation).
        "first_in_step": first_in_step,
    }
    for name in DESCRIPTIVE_ATTRS:
        if name in attrs:
            out[name] = attrs[name]
    for name, value_kind in before_classes.items():  # the class of every tensor attribute before the call
        out[f"before.{name}"] = value_kind
    return tuple(sorted(out.items()))


WHERE_MEMO_LIMIT = 256  # distinct snapshot points remembered (a trace has a dozen at most)


# How far an optimizer's update can exceed ``lr * max(|grad|, 1)``: momentum accumulates about
# 1 / (1 - beta) grads, and Adam-like updates are about ``lr`` whatever the grad.
UPDATE_GAIN = 10


def update_negligible(attrs: dict[str, Any], lr: float | None = None) -> bool:
    """Whether the update of the data in ``attrs`` may round away: its grad is too small next to
    the data, or the step's learning rate is (a schedule that ends at almost zero, a warm-up
    starting at zero). A zero rate changes nothing whatever the grad, even one the optimizer has
    moved out of the parameter (ZeRO keeps grads in its partitions)."""
    if lr is not None and lr <= 0.0:
        return True
    data, grad, eps = attrs.get("data"), attrs.get("grad"), _EPSILON.get(attrs.get("dtype", ""))
    if not (isinstance(data, dict) and isinstance(grad, dict)) or eps is None:
        return False
    d, g = data.get("amax"), grad.get("amax")
    if not isinstance(d, (int, float)) or not isinstance(g, (int, float)):
        return False
    resolution = NEGLIGIBLE_EPSILONS * eps * d
    return g < resolution or (lr is not None and UPDATE_GAIN * lr * max(g, 1.0) < resolution)


def step_lr(record: dict[str, Any]) -> float | None:
    """The learning rate in a param group's record taken after an optimizer step (the one the
    step used), or None for other records."""
    return step_lr_of(record.get("vtype"), record.get("where"), record.get("attrs") or {})


def step_lr_of(vtype: Any, where: Any, attrs: dict[str, Any]) -> float | None:
    """``step_lr`` of a variable given as its kind, snapshot point and attributes."""
    if vtype != "param_group" or where != "after:optimizer.step":
        return None
    lr = attrs.get("lr")
    return float(lr) if isinstance(lr, (int, float)) and not isinstance(lr, bool) else None


class LearningRates:
    """The learning rate each optimizer step ran with, as far as its param groups' records
    tell. A group's record after a step shows the rate the step used, or the next one when a
    scheduler runs inside the step call (DeepSpeed's engine steps its scheduler); the smaller of
    that record and the group's previous one is taken, so an update that a near-zero rate let
    round away is never read as a step that skipped the parameter."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}  # param group -> the rate its last record showed

    def observe(self, record: dict[str, Any]) -> float | None:
        """The rate in force for the step of ``record``, a param group's record after a step;
        None for other records."""
        return self.observe_rate(str(record.get("var")), step_lr(record))

    def observe_rate(self, group: str, lr: float | None) -> float | None:
        """``observe`` of the rate ``lr`` recorded for param group ``group`` (None: no rate)."""
        if lr is None:
            return None
        previous = self.last.get(group)
        self.last[group] = lr
        return lr if previous is None else min(lr, previous)


def grad_at_rounding_level(attrs: dict[str, Any], data_amax: float | None) -> bool:
    """Whether the grad in ``attrs`` is zero, or below the float resolution of data whose
    largest magnitude is ``data_amax``."""
    grad, eps = attrs.get("grad"), _EPSILON.get(attrs.get("dtype", ""))
    g = grad.get("amax") if isinstance(grad, dict) else None
    if isinstance(grad, dict) and grad.get("zero"):
        return True
    if not isinstance(g, (int, float)) or not isinstance(data_amax, (int, float)) or eps is None:
        return False
    return g < NEGLIGIBLE_EPSILONS * eps * data_amax


def touched_by_backward(after: dict[str, Any], before: dict[str, Any] | None = None) -> bool:
    """Whether a backward reached the variable: it requires grad and has one afterwards, and,
    where it had a non-zero one before, that grad moved. A frozen parameter, one whose module
    took no part in this forward (a block that stochastic depth skipped), or one left with the
    grad of an earlier stage (a pretext head while the rest fine-tunes) is none of backward's
    business; a contribution of exactly zero cannot be told from none, so it is left out too,
    whether the grad it left unchanged was non-zero or zero (``zero_grad(set_to_none=False)``
    leaves zeros on a head that this iteration's task did not use)."""
    if after.get("requires_grad") is False or ("grad" in after and after["grad"] is None):
        return False
    grad_before = (before or {}).get("grad")
    grad_after = after.get("grad")
    if isinstance(grad_before, dict) and isinstance(grad_after, dict) and value_class(grad_before) in (NONZERO, ZERO):
        h = grad_before.get("h")
        return h != grad_after.get("h") or marker_hash(h)
    return True


class _Point(NamedTuple):
    """The fields a snapshot's variables share."""

    call: Any
    where: Any
    when: str
    event: str
    step: Any
    phase: Any
    closure_calls: Any


class TransitionCollector(SnapshotCollector):
    """Pairs each ``after:<event>`` snapshot with the ``before`` one of the same call and
    variable; only the pending ``before`` halves are held."""

    def __init__(self, source: TraceSource) -> None:
        super().__init__(source)
        self.pending: dict[tuple[Any, str, Any], dict[str, Any]] = {}  # (call, event, var)
        # (event, variable) pairs already seen in the current step; reset when the step moves
        # on, so a long run holds one step's worth.
        self.seen_in_step: set[tuple[str, str]] = set()
        self.step_seen: Any = None
        self._where: dict[Any, tuple[str, str]] = {}  # "before:backward" -> ("before", "backward")
        # The examples of the optimizer step call being recorded, with the grads and data before
        # it: its param groups' learning rates are recorded after its parameters, and an update
        # that a near-zero rate let round away is undecided.
        self.held: list[tuple[TransitionExample, dict[str, Any]]] = []
        self.held_call: Any = None
        self.held_lr: float | None = None
        self.rates = LearningRates()
        self.data_amax: dict[str, float] = {}  # each variable's latest data magnitude
        self.last_grads: dict[str, dict[str, Any]] = {}  # what each variable's last backward left
        # The tensor attributes whose examples are built, per event: those of the watched keys
        # (``wanted``), remembered for the ``wanted`` they were worked out from.
        self._attributes: tuple[Any, dict[str, tuple[str, ...]]] = (None, {})

    def _attributes_of(self, event: str) -> tuple[str, ...]:
        wanted = self.wanted
        if wanted is None:
            return TENSOR_ATTRS
        if self._attributes[0] is not wanted:
            self._attributes = (wanted, {})
        memo = self._attributes[1]
        found = memo.get(event)
        if found is None:
            found = memo[event] = tuple(a for a in TENSOR_ATTRS if (event, a) in wanted)
        return found

    def feed_snapshot(self, record: dict[str, Any]) -> list[TransitionExample]:
        """The examples a snapshot record completes, its variables taken in order."""
        call = record.get("call")
        if call is None:
            return []
        where = record.get("where", "")
        split = self._where.get(where) if isinstance(where, str) else None
        if split is None:
            when, _, event = str(where).partition(":")
            split = (when, event)
            if isinstance(where, str) and len(self._where) < WHERE_MEMO_LIMIT:
                self._where[where] = split
        point = _Point(call, where, *split, record.get("step", -1), record.get("phase"), record.get(CLOSURE_CALLS))
        out: list[TransitionExample] = []
        if self.held and call != self.held_call:
            out += self._release()
        if not self._attributes_of(point.event):  # no watched example: the data's magnitude only
            for block in blocks_of(record):
                for var, data in zip(block.names, block.column("data"), strict=True):
                    self._note_magnitude(var, data)
            return out
        for var, vtype, _, attrs in variables(record):
            if self.held and vtype == "param_group":
                lr = self.rates.observe_rate(str(var), step_lr_of(vtype, where, attrs))
                if lr is not None:
                    self.held_lr = lr if self.held_lr is None else min(self.held_lr, lr)
            out += self._variable(point, var, vtype, attrs)
        return out

    def finish(self) -> list[TransitionExample]:
        return self._release()

    def _release(self) -> list[TransitionExample]:
        lr, held = self.held_lr, self.held
        self.held, self.held_call, self.held_lr = [], None, None
        if lr is None:
            return [e for e, _ in held]
        return [e._replace(update_negligible=True) if not e.update_negligible and update_negligible(b, lr) else e
                for e, b in held]

    def _note_magnitude(self, var: Any, data: Any) -> None:
        if isinstance(data, dict) and isinstance(data.get("amax"), (int, float)):
            self.data_amax[str(var)] = data["amax"]

    def _variable(self, point: _Point, var: Any, vtype: Any, attrs: dict[str, Any]) -> list[TransitionExample]:
        """The examples one variable of a snapshot completes."""
        event = point.event
        key = (point.call, event, var)
        self._note_magnitude(var, attrs.get("data"))
        attributes = self._attributes_of(event)
        if point.when == "before":
            self.pending[key] = attrs
            return []
        before = self.pending.pop(key, None)
        if point.when != "after" or before is None:
            return []
        if event == "backward" and not touched_by_backward(attrs, before):
            return []
        if event == "optimizer.step" and "grad" in before and before["grad"] is None:
            return []  # a step leaves a parameter without a grad alone (GradApplied sees the rest)
        step = point.step
        if step != self.step_seen:
            self.step_seen = step
            self.seen_in_step.clear()
        var = str(var)
        rounding = False
        if event == "backward":  # judged against the data as known now (a step records it later)
            last = self.last_grads.get(var)
            rounding = last is not None and grad_at_rounding_level(last, self.data_amax.get(var))
            self.last_grads[var] = attrs
        occurrence = (event, var)
        first_in_step = occurrence not in self.seen_in_step
        self.seen_in_step.add(occurrence)
        before_classes = {name: value_class(before[name]) for name in TENSOR_ATTRS if name in before}
        features = _features(vtype, point.phase, step, attrs, before_classes, first_in_step)
        negligible = update_negligible(before)
        # A step that evaluated its closure again (L-BFGS) ends with the grads of that closure's
        # last backward: what the step itself did to the grad cannot be told.
        evaluations = point.closure_calls
        regraded = event == "optimizer.step" and isinstance(evaluations, int) and evaluations > 1
        out = []
        label = self.source.label
        for attribute in attributes:
            if attribute not in attrs or attribute not in before or (regraded and attribute == "grad"):
                continue
            b, a = before[attribute], attrs[attribute]
            out.append(TransitionExample(  # in field order: event, attribute, hashes, classes, ...
                event, attribute, None if b is None else b.get("h"), None if a is None else a.get("h"),
                before_classes[attribute], value_class(a), features, label, step, var, negligible, rounding,
                not (unfingerprinted(b) or unfingerprinted(a))))
        if event == "optimizer.step" and out:
            self.held_call = point.call
            self.held += [(e, before) for e in out]
            return []
        return out
