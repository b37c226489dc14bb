"""Wrapping primitives (wrapt only, no torch): our marker class, idempotent patching, and its undo.

Every wrap is logged as (owner, attribute, the value found in the owner's ``__dict__`` or
``ABSENT``); ``uninstall()`` puts each one back, newest first. Post-import hooks cannot be
unregistered from wrapt: the agent registers them through ``on_import``, which ties each one to
the current generation, and ``uninstall()`` ends that generation, so older hooks do nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, SupportsIndex

import wrapt

from traincheck_agent import faults


def _resolve_qualified(module: str, qualname: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


class TracedBoundFunction(wrapt.BoundFunctionWrapper):
    """``__func__`` is our unbound wrapper, not the original: torch's LRScheduler rebinds
    ``opt.step = wrap(opt.step.__func__)``, which must keep the call instrumented."""

    @property
    def __func__(self) -> Any:
        return self._self_parent


class TracedFunction(wrapt.FunctionWrapper):
    """A wrapt wrapper that marks our instrumentation and pickles as the name it replaced, so
    ``torch.save`` / spawn pickling of objects that reference a wrapped function keep working."""

    __bound_function_wrapper__ = TracedBoundFunction

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        wrapped = self.__wrapped__
        return _resolve_qualified, (wrapped.__module__, wrapped.__qualname__)


# How many attributes this process has wrapped (a figure for debug lines and tests).
wrapped_count = 0

# Stands for an attribute that was not in the owner's ``__dict__`` before we wrapped it.
ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "ABSENT"})()
# (owner, attribute, original value as found in ``owner.__dict__`` or ABSENT), oldest first.
_undo_log: list[tuple[Any, str, Any]] = []
# Post-import hooks registered through ``on_import`` run only in the generation they were
# registered in; ``uninstall()`` starts the next one.
generation = 0


def is_traced(obj: Any) -> bool:
    return isinstance(obj, TracedFunction)


def wrap_attribute(owner: Any, attr: str, wrapper: Any) -> bool:
    """Wrap ``owner.attr`` once; returns False if it is already ours."""
    global wrapped_count
    current = vars(owner).get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
    if is_traced(current):
        return False
    if faults.armed:
        faults.fire("wrap")
    original = _own_value(owner, attr)
    wrapt.wrap_object(owner, attr, TracedFunction, (wrapper,))
    _undo_log.append((owner, attr, original))
    wrapped_count += 1
    return True


def _own_value(owner: Any, attr: str) -> Any:
    """``owner.__dict__[attr]`` (a staticmethod stays one), or ABSENT."""
    try:
        return vars(owner).get(attr, ABSENT)
    except TypeError:  # no __dict__ (slots): what getattr sees is what setattr will replace
        return getattr(owner, attr, ABSENT)


def on_import(module_name: str, hook: Callable[[Any], None]) -> None:
    """``wrapt.register_post_import_hook`` for the agent: ``hook`` does nothing once
    ``uninstall()`` has run (it fires at once if the module is already imported)."""
    registered_in = generation

    def guarded(module: Any) -> None:
        if generation == registered_in:
            hook(module)

    wrapt.register_post_import_hook(guarded, module_name)


def uninstall() -> int:
    """Undo every wrap, newest first, and retire the hooks registered so far; returns how
    many attributes were restored. An attribute that was absent from the owner's ``__dict__``
    is deleted again."""
    global generation
    generation += 1
    restored = 0
    while _undo_log:
        owner, attr, original = _undo_log.pop()
        if original is ABSENT:
            if attr in _own_dict(owner):
                delattr(owner, attr)
        else:
            setattr(owner, attr, original)
        restored += 1
    return restored


def _own_dict(owner: Any) -> Any:
    try:
        return vars(owner)
    except TypeError:
        return {}
