"""The agent's module-level locks in a child forked while another thread holds them."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from traincheck_agent import faults, messages
from traincheck_agent.fork_safety import ForkSafeLock


def _exit_status_within(pid: int, timeout_s: float) -> int | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


@pytest.mark.parametrize("lock", ["messages", "faults", "any"])
def test_a_child_forked_while_a_thread_holds_an_agent_lock_does_not_wait_for_it(lock):
    """``any``: a lock made by one of the agent's objects (the runtime's error budget, say)."""
    held_lock = {"messages": messages._seen_lock, "faults": faults._lock}.get(lock) or ForkSafeLock()
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with held_lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(5)
        pid = os.fork()
        if pid == 0:  # the child: every lock must be free here
            code = 1
            try:
                messages.warn_once(f"fork-safety-{lock}", "said in the forked child")
                with faults._lock:
                    pass
                with held_lock:
                    code = 0
            finally:
                os._exit(code)
        assert _exit_status_within(pid, 10) == 0
    finally:
        release.set()
        holder.join()
