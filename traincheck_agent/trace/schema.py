"""The trace record model shared by collect mode, inference and offline checking.

A trace is one JSON-lines file per process. Every line is one JSON object with a ``kind``:

``header`` (first line)
    ``schema``, ``run_id``, ``rank``, ``local_rank``, ``world_size``, ``local_world_size``,
    ``group_rank``, ``restart_count``, ``host``, ``pid``, ``mode``, ``started_ns``, ``argv``,
    ``versions`` (python, torch, agent, ...), ``policy_digest``, ``policies`` (file names),
    ``fingerprint_algorithms``; ``backend`` if ``torch.distributed`` was already initialised,
    ``invariants`` (file names) in check mode.
``process``
    an update of the process facts once ``torch.distributed`` is initialised: ``rank``,
    ``world_size``, ``backend``, ``t_ns``.
``call``
    one API call, written when it returns: ``id``, ``parent`` (id of the enclosing recorded call
    or null), ``thread``, ``api``, ``step``, ``phase``, ``t0_ns``, ``t1_ns``, ``args``
    (name -> descriptor), ``ret`` (descriptor), ``exc`` (exception type name or null), ``ctx``
    (non-default context: ``grad``, ``autocast``, ``in_init``, ``closure`` for an optimizer
    step given a closure that runs the iteration's forward and backward).
``state``
    one variable's state at a point of training: ``var`` (``model.fc1.weight``), ``vtype``,
    ``owner`` (model or optimizer name), ``where`` (``before:optimizer.step`` ...), ``call``
    (id of the call it was taken around, or null), ``step``, ``phase``, ``t_ns`` and
    ``attrs``: ``data`` / ``grad`` fingerprints, ``dtype``, ``shape``, ``device``,
    ``requires_grad`` and framework attributes such as ``tensor_model_parallel``. The snapshots
    of an optimizer step given a closure carry ``closure_calls``: its ``before`` one is taken
    when the closure first returns (1), its ``after`` one counts every evaluation.
``snapshot``
    everything one snapshot point looked at, in one record: the fields of a ``state`` record
    other than ``var``, ``vtype``, ``owner`` and ``attrs`` once, and the variables in
    ``blocks`` of columns (``trace.snapshot``). Readers expand it into the ``state`` records it
    stands for; the agent writes snapshots this way from schema 2 on.
``groups``
    this rank's process groups, written when they change (``step``, ``t_ns``, ``groups``: a
    list of ``{"ranks": [global ranks], "family": "size2/stride1", "name": ..., "desc": ...}``,
    ``desc`` the group's description where torch has one, e.g. ``mesh_tp``; groups of one
    rank and of the whole world left out). Cross-rank relations compare within each family
    (``trace.groups``).
``note``
    the agent's own events a reader should know about (``what``: e.g. ``dropped_records``
    with ``reason``, ``count``, ``t_ns``; ``step_boundary`` with ``boundary``, ``step``).

``step`` is the 0-based training iteration: the number of optimizer steps completed before the
iteration the event belongs to; -1 before training starts. ``phase`` is ``init``, ``train`` or
``eval``.

A fingerprint is ``{"h": "<algo>:<16 hex>", "zero": bool, "nonfinite": bool}`` (CPU float
fingerprints add ``"amax"``, the largest magnitude); two tensors of
the same device type that differ in any byte differ in ``h`` with overwhelming probability.
Hashes from different algorithms (prefix) are never compared.

The ``TypedDict`` classes below state this contract for the type checker only: records are
plain dicts at run time, and a reader still checks what it relies on (a trace file may come
from anywhere). Keys that a writer leaves out in some records sit in a ``total=False`` base.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

# 2: state snapshots are written as ``snapshot`` records (schema 1 traces are still read).
SCHEMA_VERSION = 2

KIND_HEADER = "header"
KIND_PROCESS = "process"
KIND_CALL = "call"
KIND_STATE = "state"
KIND_SNAPSHOT = "snapshot"
KIND_GROUPS = "groups"
KIND_NOTE = "note"

CLOSURE_CALLS = "closure_calls"  # state records of a step given a closure: its evaluations so far

KINDS = (KIND_HEADER, KIND_PROCESS, KIND_CALL, KIND_STATE, KIND_SNAPSHOT, KIND_GROUPS, KIND_NOTE)

PHASE_INIT = "init"
PHASE_TRAIN = "train"
PHASE_EVAL = "eval"

TRACE_GLOB = "trace_*.jsonl"


class Fingerprint(TypedDict, total=False):
    """``{"h": "<algo>:<16 hex>", "zero": ..., "nonfinite": ...}``; ``amax`` for CPU floats."""

    h: str
    zero: bool
    nonfinite: bool
    amax: float


class _HeaderOptional(TypedDict, total=False):
    backend: str  # once torch.distributed was initialised before the header was built
    invariants: list[str]  # check mode: the invariant files' names


class HeaderRecord(_HeaderOptional):
    kind: Literal["header"]
    schema: int
    run_id: str
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    group_rank: int
    restart_count: int
    host: str
    pid: int
    mode: str
    started_ns: int
    argv: list[str]
    versions: dict[str, str]  # python, agent, torch, deepspeed, ...
    policies: list[str]  # file names
    policy_digest: str
    fingerprint_algorithms: dict[str, str]


class ProcessRecord(TypedDict, total=False):
    """The facts are absent when ``torch.distributed`` is not (or no longer) initialised."""

    kind: Literal["process"]
    t_ns: int
    rank: int
    world_size: int
    backend: str


class _CallOptional(TypedDict, total=False):
    ret: Any  # a descriptor; absent when returns are not described or the call raised
    ctx: dict[str, Any]  # non-default execution context: grad, inference, autocast, in_init, ...


class CallRecord(_CallOptional):
    kind: Literal["call"]
    id: int
    parent: int | None
    thread: int
    api: str
    step: int
    phase: str
    t0_ns: int
    t1_ns: int
    args: dict[str, Any]  # name -> descriptor
    exc: str | None


class _StateOptional(TypedDict, total=False):
    owner: str  # model or optimizer name, where one is known
    grad_sync: bool  # False inside DDP's no_sync
    closure_calls: int  # an optimizer step given a closure: how often it had evaluated it


class StateRecord(_StateOptional):
    kind: Literal["state"]
    var: str
    vtype: str
    where: str
    call: int | None
    step: int
    phase: str
    t_ns: int
    attrs: dict[str, Any]  # data / grad fingerprints, dtype, shape, device, requires_grad, ...


class _SnapshotOptional(TypedDict, total=False):
    grad_sync: bool
    closure_calls: int


class SnapshotRecord(_SnapshotOptional):
    kind: Literal["snapshot"]
    where: str
    call: int | None
    step: int
    phase: str
    t_ns: int
    blocks: list[dict[str, Any]]  # vars, vtype, owner, cols, extra (``trace.snapshot``)


class _GroupOptional(TypedDict, total=False):
    name: str
    desc: str


class Group(_GroupOptional):
    ranks: list[int]  # global ranks, sorted
    family: str  # "size2/stride1"


class GroupsRecord(TypedDict):
    kind: Literal["groups"]
    t_ns: int
    step: int
    groups: list[Group]


class _NoteOptional(TypedDict, total=False):
    reason: str  # dropped_records: buffer_full, unserialisable, size_limit
    count: int  # dropped_records
    t_ns: int
    boundary: str  # step_boundary: e.g. manual_update
    step: int


class NoteRecord(_NoteOptional):
    kind: Literal["note"]
    what: str  # e.g. dropped_records, step_boundary


TraceRecord = (HeaderRecord | ProcessRecord | CallRecord | StateRecord | SnapshotRecord | GroupsRecord
               | NoteRecord)


def trace_file_name(run_id: str, rank: int, pid: int) -> str:
    return f"trace_{run_id}_rank{rank}_pid{pid}.jsonl"
