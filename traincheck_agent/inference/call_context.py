"""What a call record says about the context of the call, read the same way by every relation
that deduces preconditions over calls: the execution context (autocast, grad mode, phase) and
the receiver (the module or object the call is a method of)."""

from __future__ import annotations

from typing import Any

# The calls that set a mode (``Module.train(mode)``, ``requires_grad_``): their flags change the
# context instead of following it, and scripts legitimately call ``model.train()`` in whatever
# mode the model already is, so relations over flags leave them alone.
MODE_SETTERS = frozenset({"torch.nn.Module.train", "torch.nn.Module.requires_grad_", "torch.Tensor.requires_grad_"})


def context_features(record: dict[str, Any]) -> dict[str, Any]:
    """``autocast`` (e.g. ``cpu:bfloat16``, or None), ``grad_enabled``, ``phase`` and
    ``accumulating`` (a gradient-accumulation micro-step that ends without an update)."""
    ctx = record.get("ctx") or {}
    return {"autocast": ctx.get("autocast"), "grad_enabled": ctx.get("grad", True), "phase": record.get("phase"),
            "accumulating": ctx.get("accumulating", False)}


def receiver(record: dict[str, Any]) -> dict[str, Any] | None:
    """The descriptor of ``self``, for method calls."""
    desc = (record.get("args") or {}).get("self")
    return desc if isinstance(desc, dict) else None


def module_training(record: dict[str, Any]) -> bool | None:
    """The training flag of the module a call record is the forward of; None for other calls."""
    desc = receiver(record)
    flag = desc.get("training") if desc is not None else None
    return flag if isinstance(flag, bool) else None


def receiver_name(record: dict[str, Any]) -> str:
    """The receiver's name (a module's path in the model), or ""."""
    desc = receiver(record)
    return str(desc.get("name", "")) if desc is not None else ""


def tensor_dtype(desc: Any) -> str | None:
    """The dtype of a tensor descriptor, or of the first tensor in a container's."""
    if isinstance(desc, dict):
        if desc.get("t") in ("Tensor", "Parameter"):
            return desc.get("dtype")
        for item in desc.get("items", []) if isinstance(desc.get("items"), list) else []:
            found = tensor_dtype(item)
            if found is not None:
                return found
    return None


# The last record ``call_features`` read and what it found: the relations a record is fed to
# ask in turn, so the second one gets the answer for free. One tuple, replaced whole, so that
# threads reading records of their own never see another's answer.
_last_features: tuple[Any, tuple[tuple[str, Any], ...]] = (None, ())


def call_features(record: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The context of a call record that preconditions may use: ``context_features`` plus the
    receiver's type (``self.type``) and the first tensor argument's dtype and number of dims
    (``input.dtype``, ``input.ndim``)."""
    global _last_features
    last = _last_features
    if last[0] is record:
        return last[1]
    features = _call_features(record)
    _last_features = (record, features)
    return features


def _call_features(record: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    args = record.get("args") or {}
    out = context_features(record)
    self_desc = receiver(record)
    if self_desc is not None:
        out["self.type"] = self_desc.get("t")
    for name, desc in args.items():
        if name != "self":
            dtype = tensor_dtype(desc)
            if dtype is not None:
                out["input.dtype"] = dtype
                shape = desc.get("shape") if desc.get("t") in ("Tensor", "Parameter") else None
                if isinstance(shape, list):
                    out["input.ndim"] = len(shape)
                break
    return tuple(sorted(out.items()))


# The context a call invariant is judged in (see ``preconditions.domain_of``): an output dtype
# learned without autocast says nothing under it, nor a kept batch dim about an unbatched input.
CALL_DOMAIN = ("autocast", "grad_enabled", "phase", "self.type", "input.dtype", "input.ndim")
