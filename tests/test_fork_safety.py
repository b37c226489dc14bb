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


def test_a_forked_child_runs_the_agents_hooks_in_their_declared_order_past_a_failing_one():
    """Registered out of order, one of them failing: the child still runs every hook, in the
    order the registry declares, whatever order they were registered in."""
    from traincheck_agent import fork_safety

    read_fd, write_fd = os.pipe()
    saved = dict(fork_safety._child_hooks)

    def note(name: str):
        return lambda: os.write(write_fd, name.encode() + b"\n")

    def broken():
        os.write(write_fd, b"writers\n")
        raise RuntimeError("a hook fails")

    try:
        fork_safety.on_fork_in_child("sigterm_watch", note("sigterm_watch"))
        fork_safety.on_fork_in_child("writers", broken)
        fork_safety.on_fork_in_child("runtime", note("runtime"))
        with pytest.raises(ValueError, match="unknown fork hook"):
            fork_safety.on_fork_in_child("nothing", note("nothing"))
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        assert _exit_status_within(pid, 10) == 0
    finally:
        fork_safety._child_hooks.clear()
        fork_safety._child_hooks.update(saved)
        os.close(write_fd)
    with os.fdopen(read_fd) as out:
        ran = out.read().split()
    assert ran == ["runtime", "writers", "sigterm_watch"]
