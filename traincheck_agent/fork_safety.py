"""What a forked child renews: the agent's locks, then each part's state, in one ordered list.

A child forked while another thread of the parent held a lock would wait for it forever: the
thread that would release it does not exist in the child. The agent's own locks (warnings said
once, injected faults, the runtime's error budget and pending action) are ``ForkSafeLock``s,
which every forked child replaces with fresh, unheld locks.

After the locks, the parts of the agent that hold per-process state forget the parent's, in the
order of ``CHILD_HOOK_ORDER`` (whatever order their modules were imported in): the runtime's
per-thread call stack, then the trace writers (and the checker each one feeds), then the
SIGTERM watch. One ``os.register_at_fork`` runs them all; a hook that fails is skipped, and the
next ones still run.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

CHILD_HOOK_ORDER = ("locks", "runtime", "writers", "sigterm_watch")


class ForkSafeLock:
    """A ``threading.Lock`` for ``with`` blocks, renewed in every forked child."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        _locks.add(self)

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._lock.__exit__(*exc)


_locks: weakref.WeakSet[ForkSafeLock] = weakref.WeakSet()


def _renew_locks() -> None:
    for lock in list(_locks):
        lock._lock = threading.Lock()


_child_hooks: dict[str, Callable[[], None]] = {"locks": _renew_locks}


def on_fork_in_child(name: str, hook: Callable[[], None]) -> None:
    """Run ``hook`` in every forked child, at ``name``'s place in ``CHILD_HOOK_ORDER``
    (registering a name again replaces its hook)."""
    if name not in CHILD_HOOK_ORDER:
        raise ValueError(f"unknown fork hook {name!r}; the order is {CHILD_HOOK_ORDER}")
    _child_hooks[name] = hook


def run_child_hooks() -> None:
    for name in CHILD_HOOK_ORDER:
        hook = _child_hooks.get(name)
        if hook is not None:
            with contextlib.suppress(Exception):  # the child and the later hooks carry on
                hook()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=run_child_hooks)
