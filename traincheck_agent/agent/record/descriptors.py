"""Descriptors: what a trace records about an argument or a return value.

Never a tensor's values: type, shape, dtype, device, requires_grad and, when the policy asks
for it, a fingerprint. Numbers are recorded as they are, and so are short strings passed as
arguments themselves (options such as ``reduction="mean"``); a string inside a container or
a long one is recorded as its length only, since that is where a batch's text would be (a
list of sentences, a dict of fields). Containers are described up to a few items. Everything here runs on the training thread, so it is kept to
attribute reads and small dicts.
"""

from __future__ import annotations

import inspect
import itertools
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from traincheck_agent.agent.record.builtin_views import builtin_items, builtin_len, key_text
from traincheck_agent.exception_text import class_name
from traincheck_agent.fingerprint import fingerprint_tensor
from traincheck_agent.policy.model import DESCRIBE_FINGERPRINT, DESCRIBE_NONE

MAX_ITEMS = 8
MAX_STR = 64  # longest string argument recorded as it is
MAX_DEPTH = 2

_dtype_names: dict[torch.dtype, str] = {}


def dtype_name(dtype: torch.dtype) -> str:
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = str(dtype).replace("torch.", "")
    return name


_device_names: dict[torch.device, str] = {}


def device_name(device: torch.device) -> str:
    name = _device_names.get(device)
    if name is None:
        name = _device_names[device] = str(device)
    return name


_PARAMETER = torch.nn.Parameter
_TENSOR = torch.Tensor


def is_parameter(t: torch.Tensor) -> bool:
    """``isinstance(t, nn.Parameter)``, without running Parameter's Python ``__instancecheck__``
    for the two classes nearly every tensor has."""
    cls = type(t)
    if cls is _PARAMETER:
        return True
    if cls is _TENSOR:
        return bool(getattr(t, "_is_param", False))  # what that check looks at for a plain tensor
    return isinstance(t, _PARAMETER)


# The parameters registered with a module, by the address of their data: ``p.data`` is a new
# tensor object at each access, so a tensor at the same address and of the same shape as a live
# parameter is that parameter seen through ``.data`` (an init routine's ``p.data.normal_()``).
_parameters_at: dict[int, weakref.ref] = {}
_prune_at = [4096]  # entries past which the dead ones are dropped (doubles when all are alive)


def note_parameter(param: torch.Tensor) -> None:
    """Remember where ``param``'s data lives (called when a module registers it)."""
    try:
        ptr = param.data_ptr()
    except Exception:  # no storage to speak of (a meta or sparse tensor)
        return
    if ptr:
        _parameters_at[ptr] = weakref.ref(param)
        if len(_parameters_at) > _prune_at[0]:
            for key in [k for k, ref in _parameters_at.items() if ref() is None]:
                del _parameters_at[key]
            if len(_parameters_at) > _prune_at[0] // 2:
                _prune_at[0] *= 2


def _parameter_behind(t: torch.Tensor) -> torch.Tensor | None:
    """The live parameter whose data ``t`` is, or None."""
    try:
        ref = _parameters_at.get(t.data_ptr())
    except Exception:
        return None
    param = ref() if ref is not None else None
    if param is None or param is t or param.shape != t.shape or param.data_ptr() != t.data_ptr():
        return None
    return param


def describe_tensor(t: torch.Tensor, names: dict[int, str], level: str) -> dict[str, Any]:
    parameter = is_parameter(t)
    out: dict[str, Any] = {
        "t": "Parameter" if parameter else "Tensor",
        "shape": list(t.shape),
        "dtype": dtype_name(t.dtype),
        "device": device_name(t.device),
        "rg": t.requires_grad,
        "oid": id(t),
    }
    name = names.get(id(t))
    # ``p.data`` never requires grad: activations of a training forward, which do, are skipped.
    if not parameter and not out["rg"] and _parameters_at:
        behind = _parameter_behind(t)
        if behind is not None:
            out["of"] = id(behind)  # the parameter this tensor is the data of
            name = names.get(id(behind))
    if name is not None:
        out["name"] = name
    if level == DESCRIBE_FINGERPRINT:
        out["fp"] = fingerprint_tensor(t)
    return out


def describe(value: Any, level: str, names: dict[int, str], module_names: dict[int, str], depth: int = 0,
             data: bool = False) -> Any:
    """``data``: ``value`` is a batch (what a data-loading API returns), so its Python numbers
    are content too and only their type is recorded.

    Only what the types say is read: the class is tested with ``issubclass`` on ``type(value)``
    (never ``isinstance``, which asks the object for its ``__class__``), and the builtin types'
    own methods give lengths and items, so a subclass's ``__len__``, ``__iter__``,
    ``__getitem__``, ``__str__`` or ``__repr__`` never runs here."""
    if value is None:
        return value
    cls = type(value)
    if cls is bool:
        return value
    if issubclass(cls, (int, float)):
        if data:
            return {"t": class_name(cls)}
        if issubclass(cls, bool):
            return bool(int.__int__(value))
        return int.__int__(value) if issubclass(cls, int) else float.__float__(value)
    if issubclass(cls, str):
        length = str.__len__(value)
        return str.__str__(value) if depth == 0 and not data and length <= MAX_STR else {"t": "str", "len": length}
    if issubclass(cls, torch.Tensor):
        return describe_tensor(value, names, level)
    if issubclass(cls, torch.nn.Module):
        # a module under construction (its own __init__ being recorded) has no flag yet
        out: dict[str, Any] = {"t": class_name(cls), "training": _training_flag(value)}
        name = module_names.get(id(value))
        if name is not None:
            out["name"] = name
        return out
    if cls is torch.dtype or cls is torch.device:
        return str(value)
    if issubclass(cls, (list, tuple)):
        items = builtin_items(value)
        out = {"t": class_name(cls), "len": builtin_len(value)}
        if depth < MAX_DEPTH:
            out["items"] = [describe(v, level, names, module_names, depth + 1, data) for v in items[:MAX_ITEMS]]
        return out
    if issubclass(cls, dict):
        out = {"t": "dict", "len": builtin_len(value)}
        if depth < MAX_DEPTH:
            out["items"] = {
                key_text(k): describe(v, level, names, module_names, depth + 1, data)
                for k, v in itertools.islice(dict.items(value), MAX_ITEMS)
            }
        return out
    return {"t": class_name(cls)}


def _training_flag(module: torch.nn.Module) -> bool | None:
    """``module.training`` as ``Module.__init__`` stored it, without a subclass's ``__getattr__``."""
    try:
        flag = object.__getattribute__(module, "__dict__").get("training")
    except Exception:
        return None
    return flag if type(flag) is bool else None


class ArgSignature(NamedTuple):
    """What a recorded call needs of its function's signature: the positional parameter names
    (without ``self`` for methods), and the boolean defaults of parameters a caller may leave
    out. Mode flags such as ``F.dropout(x, p)``'s ``training=True`` are recorded with their
    default value, so a call that relies on one reads the same as a call that passes it."""

    names: tuple[str, ...] | None
    flag_defaults: tuple[tuple[int, str, bool], ...]  # (position or -1 for keyword-only, name, default)


def arg_signature(func: Callable[..., Any], bound_method: bool) -> ArgSignature:
    """The signature facts of ``func``; positional names are None when the signature cannot be
    read (C functions without a documented signature)."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return _signature_from_docstring(func)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if bound_method and positional and positional[0].name in ("self", "cls"):
        positional = positional[1:]
    flags = [(positional.index(p) if p in positional else -1, p.name, p.default) for p in params
             if type(p.default) is bool and p.kind is not p.POSITIONAL_ONLY]
    return ArgSignature(tuple(p.name for p in positional), tuple(flags))


def _signature_from_docstring(func: Callable[..., Any]) -> ArgSignature:
    """torch's C functions document their signature on the docstring's first line, e.g.
    ``normal_(mean=0, std=1, *, generator=None) -> Tensor``: read the positional names and the
    boolean defaults."""
    doc = (getattr(func, "__doc__", None) or "").strip()
    first = doc.splitlines()[0] if doc else ""
    name = getattr(func, "__name__", "")
    if not name or not first.startswith(f"{name}(") or ")" not in first:
        return ArgSignature(None, ())
    names: list[str] = []
    flags: list[tuple[int, str, bool]] = []
    keyword_only = False
    for part in first[len(name) + 1 : first.index(")")].split(","):
        key, _, default = (s.strip() for s in part.partition("="))
        if key in ("*", "") or key.startswith("*"):
            keyword_only = True
            continue
        if not key.isidentifier():
            break
        if default in ("True", "False"):
            flags.append((-1 if keyword_only else len(names), key, default == "True"))
        if not keyword_only:
            names.append(key)
    return ArgSignature(tuple(names), tuple(flags))


NO_SIGNATURE = ArgSignature(None, ())


def describe_args(
    signature: ArgSignature,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    level: str,
    names: dict[int, str],
    module_names: dict[int, str],
) -> dict[str, Any]:
    if level == DESCRIBE_NONE:
        return {}
    out: dict[str, Any] = {}
    arg_names = signature.names
    for i, value in enumerate(args):
        key = arg_names[i] if arg_names is not None and i < len(arg_names) else str(i)
        out[key] = describe(value, level, names, module_names)
    for key, value in kwargs.items():
        out[key] = describe(value, level, names, module_names)
    for position, key, default in signature.flag_defaults:
        if key not in out and (position < 0 or position >= len(args)):
            out[key] = default
    return out
