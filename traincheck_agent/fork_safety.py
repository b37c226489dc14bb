"""Locks that a forked child gets anew.

A child forked while another thread of the parent held a lock would wait for it forever: the
thread that would release it does not exist in the child. The agent's own locks (warnings said
once, injected faults, the runtime's error budget and pending action) are ``ForkSafeLock``s,
which every forked child replaces with fresh, unheld locks.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any


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


def _renew_in_child() -> None:
    for lock in list(_locks):
        lock._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_in_child)
