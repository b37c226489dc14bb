"""The agent's own tensor work, kept out of sight of the user's tensor hooks.

Profilers, debuggers and op counters watch a training through ``__torch_function__`` overrides
on tensor subclasses and through active ``TorchDispatchMode``s. The agent's reads of a tensor's
attributes and its fingerprinting ops are none of their business: inside ``hooks_off()`` they
reach neither (the plain tensor is seen instead), so what those tools count is the same with the
agent as without.
"""

from __future__ import annotations

from typing import Any

import torch

try:  # the one way to step out of the active dispatch modes (restored on exit)
    from torch.utils._python_dispatch import _disable_current_modes
except ImportError:  # pragma: no cover - an older or newer torch without it
    _disable_current_modes = None  # type: ignore[assignment]

_no_subclass_hooks = torch._C.DisableTorchFunctionSubclass
_dispatch_depth = torch._C._len_torch_dispatch_stack


class hooks_off:  # noqa: N801 - used like a function: ``with hooks_off():``
    __slots__ = ("_modes", "_subclass")

    def __enter__(self) -> None:
        self._subclass = _no_subclass_hooks()
        self._subclass.__enter__()
        self._modes: Any = None
        if _disable_current_modes is not None and _dispatch_depth():
            self._modes = _disable_current_modes()
            self._modes.__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._modes is not None:
                self._modes.__exit__(*exc)
        finally:
            self._subclass.__exit__(*exc)
