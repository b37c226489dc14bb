"""Wrapping primitives (wrapt only, no torch): our marker class and idempotent patching."""

from __future__ import annotations

import importlib
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
    wrapt.wrap_object(owner, attr, TracedFunction, (wrapper,))
    wrapped_count += 1
    return True
