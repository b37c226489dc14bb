"""The trace record model shared by collect mode, inference and offline checking.

A trace is one JSON-lines file per process. Every line is one JSON object with a ``kind``:

``header`` (first line)
    ``schema``, ``run_id``, ``rank``, ``local_rank``, ``world_size``, ``restart_count``,
    ``host``, ``pid``, ``mode``, ``started_ns``, ``versions`` (python, torch, agent, ...),
    ``policy_digest``, ``policies`` (file names), ``fingerprint_algorithms``.
``process``
    an update of the process facts once ``torch.distributed`` is initialised: ``rank``,
    ``world_size``, ``backend``, ``t_ns``.
``call``
    one API call, written when it returns: ``id``, ``parent`` (id of the enclosing recorded call
    or null), ``thread``, ``api``, ``step``, ``phase``, ``t0_ns``, ``t1_ns``, ``args``
    (name -> descriptor), ``ret`` (descriptor), ``exc`` (exception type name or null).
``state``
    one variable's state at a point of training: ``var`` (``model.fc1.weight``), ``vtype``,
    ``owner`` (model or optimizer name), ``where`` (``before:optimizer.step`` ...), ``call``
    (id of the call it was taken around, or null), ``step``, ``phase``, ``t_ns`` and
    ``attrs``: ``data`` / ``grad`` fingerprints, ``dtype``, ``shape``, ``device``,
    ``requires_grad`` and framework attributes such as ``tensor_model_parallel``.
``groups``
    this rank's process groups, written when they change (``step``, ``t_ns``, ``groups``: a
    list of ``{"ranks": [global ranks], "family": "size2/stride1", "name": ..., "desc": ...}``,
    ``desc`` the group's description where torch has one, e.g. ``mesh_tp``; groups of one
    rank and of the whole world left out). Cross-rank relations compare within each family
    (``trace.groups``).
``note``
    the agent's own events a reader should know about (``what``: e.g. ``dropped_records``).

``step`` is the 0-based training iteration: the number of optimizer steps completed before the
iteration the event belongs to; -1 before training starts. ``phase`` is ``init``, ``train`` or
``eval``.

A fingerprint is ``{"h": "<algo>:<16 hex>", "zero": bool, "nonfinite": bool}`` (CPU float
fingerprints add ``"amax"``, the largest magnitude); two tensors of
the same device type that differ in any byte differ in ``h`` with overwhelming probability.
Hashes from different algorithms (prefix) are never compared.
"""

SCHEMA_VERSION = 1

KIND_HEADER = "header"
KIND_PROCESS = "process"
KIND_CALL = "call"
KIND_STATE = "state"
KIND_GROUPS = "groups"
KIND_NOTE = "note"

KINDS = (KIND_HEADER, KIND_PROCESS, KIND_CALL, KIND_STATE, KIND_GROUPS, KIND_NOTE)

PHASE_INIT = "init"
PHASE_TRAIN = "train"
PHASE_EVAL = "eval"

TRACE_GLOB = "trace_*.jsonl"


def trace_file_name(run_id: str, rank: int, pid: int) -> str:
    return f"trace_{run_id}_rank{rank}_pid{pid}.jsonl"
