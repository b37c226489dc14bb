"""Process-wide hooks that keep traces whole: flush at exit, on SIGTERM, after fork, and in
multiprocessing children (which leave through ``os._exit``).

The writers register here; nothing here imports the writer, so the writer can import this.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
import weakref
from types import FrameType
from typing import TYPE_CHECKING

from traincheck_agent.fork_safety import on_fork_in_child

if TYPE_CHECKING:
    from traincheck_agent.agent.record.trace_writer import TraceWriter

# Bound on the time the SIGTERM handler spends flushing before the process dies as it would have.
SIGTERM_FLUSH_TIMEOUT_S = 3.0

# --------------------------------------------------------------------- process-wide hooks

live_writers: weakref.WeakSet[TraceWriter] = weakref.WeakSet()
_exit_writers: list[TraceWriter] = []
_exit_hooks_installed = False


def _writers_after_fork_in_child() -> None:
    for writer in list(live_writers):
        with contextlib.suppress(Exception):  # one writer's failure leaves the others to renew
            writer._after_fork_in_child()


on_fork_in_child("writers", _writers_after_fork_in_child)


def install_flush_on_exit(writer: TraceWriter) -> None:
    """Flush ``writer`` at normal exit, on uncaught exceptions and on Ctrl-C; on SIGTERM once
    :func:`arm_sigterm_flush` has run.

    Uncaught exceptions, ``sys.exit`` and KeyboardInterrupt all end in ``atexit``, which no
    program can see. SIGTERM kills a process without running ``atexit``; the handler for it is
    visible to the program, so it waits until there is something to flush.
    """
    global _exit_hooks_installed
    if writer not in _exit_writers:
        _exit_writers.append(writer)
    if _exit_hooks_installed:
        return
    _exit_hooks_installed = True  # a forked child inherits both atexit and the signal handler
    atexit.register(_close_all_at_exit)


def _close_all_at_exit() -> None:
    for writer in list(_exit_writers):
        writer.close()


# --------------------------------------------------------------------- SIGTERM
#
# A Python-level handler runs only when the main thread comes back to the interpreter, which a
# rank stuck in a collective or a store wait may not do for minutes, while without the agent
# SIGTERM would have killed it at once. The C-level handler also writes the signal number to the
# wakeup fd immediately, so a watcher thread sees SIGTERM; if the main thread has not started
# handling it within a short grace, the watcher flushes and makes the process die of SIGTERM.

_SIGTERM_GRACE_S = 0.5
_sigterm_in_main = threading.Event()  # set when the main thread's handler has started
_watch_fds: tuple[int, int] | None = None  # (read, write) ends of the wakeup pipe
_watch_pid: int | None = None
_real_set_wakeup_fd = signal.set_wakeup_fd


_sigterm_armed_pid: int | None = None


def arm_sigterm_flush() -> bool:
    """Install the SIGTERM flush (handler and watcher), once per process, from the main thread.

    Called when the first record is queued and at each step end until it has run, so that a
    program sees no handler, no wakeup fd and no watcher thread before it traces anything. The
    handler goes in only where it cannot change the program's behaviour: the current one is the
    default. Returns False while it still has to run (not the main thread), True once settled.
    """
    global _sigterm_armed_pid
    pid = os.getpid()
    if _sigterm_armed_pid == pid:
        return True
    if not _exit_writers or threading.current_thread() is not threading.main_thread():
        return False
    _sigterm_armed_pid = pid
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
        elif current is not _on_sigterm:  # the program's own handler decides; atexit flushes
            return True
    except (ValueError, OSError):  # not the main interpreter, or signals unavailable
        return True
    ensure_sigterm_watch()
    return True


def _flush_for_sigterm() -> None:
    deadline = time.monotonic() + SIGTERM_FLUSH_TIMEOUT_S
    for writer in list(_exit_writers):
        writer.flush(max(0.0, deadline - time.monotonic()))


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Flush within a bounded time, then die of SIGTERM exactly as without the agent."""
    ours = signal.getsignal(signal.SIGTERM) is _on_sigterm
    if ours:
        _sigterm_in_main.set()
    _flush_for_sigterm()
    if not ours:
        # Called by a handler the program installed later and that chains to the one it
        # replaced (Lightning does): without the agent there was nothing to chain to, so the
        # program's handler decides what happens next.
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def ensure_sigterm_watch() -> None:
    """Start this process's SIGTERM watcher (main thread only) unless the wakeup fd is taken."""
    global _watch_fds, _watch_pid
    if os.name != "posix" or _watch_pid == os.getpid():
        return
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not _on_sigterm:
        return
    try:
        read_fd, write_fd = os.pipe()  # not inherited across exec (PEP 446)
    except OSError:
        return
    try:
        os.set_blocking(write_fd, False)
        previous = _real_set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (OSError, ValueError):
        _close_fds(read_fd, write_fd)
        return
    if previous != -1:  # asyncio or the program uses the wakeup fd: it stays theirs
        _real_set_wakeup_fd(previous)
        _close_fds(read_fd, write_fd)
        return
    thread = threading.Thread(
        target=_watch_sigterm, args=(read_fd,), name="traincheck-sigterm-watch", daemon=True
    )
    try:
        thread.start()
    except RuntimeError:  # interpreter shutting down
        _real_set_wakeup_fd(-1)
        _close_fds(read_fd, write_fd)
        return
    _watch_fds = (read_fd, write_fd)
    _watch_pid = os.getpid()
    signal.set_wakeup_fd = _set_wakeup_fd_as_the_program_sees_it


def _set_wakeup_fd_as_the_program_sees_it(fd: int, /, *, warn_on_full_buffer: bool = True) -> int:
    """``signal.set_wakeup_fd`` with the watcher's descriptor out of sight.

    The program gets back what it would have without the agent: -1 where only the watcher's
    descriptor was set. Its own descriptor takes over (the watcher goes quiet, the Python-level
    handler still flushes); when it sets -1 again, the watcher's descriptor comes back.
    """
    previous = _real_set_wakeup_fd(fd, warn_on_full_buffer=warn_on_full_buffer)
    watch = _watch_fds if _watch_pid == os.getpid() else None
    if watch is None:
        return previous
    if previous == watch[1]:
        previous = -1
    if fd == -1 and signal.getsignal(signal.SIGTERM) is _on_sigterm:
        with contextlib.suppress(OSError, ValueError):
            _real_set_wakeup_fd(watch[1], warn_on_full_buffer=False)
    return previous


def _watch_sigterm(read_fd: int) -> None:
    term = int(signal.SIGTERM)
    while True:
        try:
            data = os.read(read_fd, 512)
        except OSError:
            return
        if not data:
            return
        if term not in data or signal.getsignal(signal.SIGTERM) is not _on_sigterm:
            continue  # another signal, or the program's own SIGTERM handler decides
        if _sigterm_in_main.wait(_SIGTERM_GRACE_S):
            # The main thread flushes and re-sends SIGTERM; only if that hangs do we go on.
            time.sleep(SIGTERM_FLUSH_TIMEOUT_S + 1.0)
        else:
            _flush_for_sigterm()
        _die_of_sigterm_from_thread()


def _die_of_sigterm_from_thread() -> None:
    """Restore the default action at C level (``signal.signal`` is main-thread only), re-send."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        libc.signal(int(signal.SIGTERM), None)  # NULL is SIG_DFL
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1.0)
    except Exception:
        pass
    os._exit(128 + int(signal.SIGTERM))  # what a shell reports for a process killed by SIGTERM


def _forget_sigterm_watch_in_child() -> None:
    """A forked child must not wake its parent's watcher: detach from the inherited pipe."""
    global _watch_fds, _watch_pid, _sigterm_in_main
    _sigterm_in_main = threading.Event()
    if _watch_fds is None:
        return
    read_fd, write_fd = _watch_fds
    _watch_fds = None
    _watch_pid = None
    try:
        previous = _real_set_wakeup_fd(-1)
        if previous not in (write_fd, -1):
            _real_set_wakeup_fd(previous)  # someone else's: keep it
    except (ValueError, OSError):
        # Still registered: point it at /dev/null so the child's signals go nowhere.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, write_fd)
        os.close(devnull)
        write_fd = -1
    _close_fds(read_fd, write_fd)


on_fork_in_child("sigterm_watch", _forget_sigterm_watch_in_child)


def _close_fds(*fds: int) -> None:
    for fd in fds:
        if fd != -1:
            with contextlib.suppress(OSError):
                os.close(fd)


def register_multiprocessing_exit(writer: TraceWriter) -> None:
    """In a multiprocessing child (which leaves through ``os._exit``), flush at its exit too."""
    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return
    try:
        if mp.parent_process() is None:
            return
        from multiprocessing import util

        util.Finalize(writer, writer.close, exitpriority=-100)
    except Exception:
        pass
