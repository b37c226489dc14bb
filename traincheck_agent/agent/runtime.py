"""The agent's per-process state: one ``Runtime`` while the agent is active, else ``None``.

Wrappers read ``runtime.current`` on every call, so switching the agent off (error budget,
DataLoader worker, fork child) is a single assignment and the wrapped APIs fall back to plain
pass-through calls.
"""

from __future__ import annotations

import itertools
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traincheck_agent import faults
from traincheck_agent.exception_text import exception_text
from traincheck_agent.fork_safety import ForkSafeLock
from traincheck_agent.messages import debug, warn, warn_once

if TYPE_CHECKING:
    from collections.abc import Callable

    from traincheck_agent.agent.record.clock import TrainingClock
    from traincheck_agent.agent.record.model_registry import ModelRegistry
    from traincheck_agent.agent.record.state_probe import StateProbe
    from traincheck_agent.agent.record.trace_writer import TraceWriter
    from traincheck_agent.check.requirements import CallSelection
    from traincheck_agent.policy import Policy
    from traincheck_agent.settings import Settings

ERROR_BUDGET = 50
# Check mode with raise / abort: the longest the training thread waits for the checker to catch
# up at the end of an outermost call.
SYNC_CHECK_TIMEOUT_S = 10.0

current: Runtime | None = None


class _ThreadState(threading.local):
    """Per-thread call stack of recorded call ids, and a flag set while agent code runs so
    that tensor operations done by the agent itself are never recorded."""

    def __init__(self) -> None:
        self.stack: list[int] = []
        self.busy = False
        self.init_depth = 0  # how many initialising calls (``trace.initialisers``) are open


thread_state = _ThreadState()
_call_ids = itertools.count(1)


def next_call_id() -> int:
    return next(_call_ids)


@dataclass(frozen=True)
class CheckSwitches:
    """What check mode changes in the wrappers' behaviour (collect mode has none)."""

    # Which calls are recorded, and at which detail (collect mode: what the policy says).
    selection: CallSelection
    # Raise / abort: run the checker at the end of every outermost call, so that the action a
    # violation asks for runs at the next safe point (a wrapped call's entry).
    sync_check: bool
    # The checker runs in this process: the training thread feeds it each step's records at the
    # step's end. Handing them to the writer's thread instead costs more: the two threads trade
    # the interpreter lock, and the checker thread takes a core from torch's.
    check_at_step_end: bool


class Runtime:
    """The active agent of this process: its settings, policy, writer, clock, registry and
    probe, and the check-mode switches the wrappers read on every call."""

    def __init__(self, settings: Settings, policy: Policy, writer: TraceWriter, clock: TrainingClock,
                 registry: ModelRegistry, probe: StateProbe, check: CheckSwitches | None = None,
                 worker_check_pending: bool = False) -> None:
        self.settings = settings
        self.policy = policy
        self.writer = writer
        self.clock = clock
        self.registry = registry
        self.probe = probe
        self.pid = os.getpid()
        # Set in processes that may turn out to be DataLoader workers (fork or spawn children).
        self.worker_check_pending = worker_check_pending
        self.errors = 0
        self._error_lock = ForkSafeLock()
        # Read by the wrappers on every call: plain attributes, copied from ``check``.
        self.selection: CallSelection | None = check.selection if check else None
        self.sync_check = check.sync_check if check else False
        self.check_at_step_end = check.check_at_step_end if check else False
        # The action a violation asked for (raise / abort), run at the next safe point.
        self.action_pending: Callable[[], BaseException | None] | None = None
        self._action_lock = ForkSafeLock()

    def emit(self, record: dict[str, Any]) -> None:
        self.probe.groups.poll(record.get("step", -1), discover=False)  # groups before the record
        self.writer.emit(record)

    def end_outermost_call(self) -> None:
        """At the end of every outermost recorded call: apply a finished step, after which the
        step's records are handed on: checked here, in the training thread, where the checker
        runs in this process, else by the writer's thread (``TraceWriter.step_ended``)."""
        if self.clock.advance_if_pending() and not (self.check_at_step_end and self.check_now()):
            self.writer.step_ended()

    def request_action(self, action: Callable[[], BaseException | None]) -> None:
        """Ask for ``action`` at the next safe point (called from the checker's thread)."""
        with self._action_lock:
            if self.action_pending is None:
                self.action_pending = action

    def run_pending_action(self) -> BaseException | None:
        """At a safe point of the main thread: run the pending action. It may end the process
        (``abort``) or return the exception the wrapper raises into the training (``raise``)."""
        if threading.get_ident() != threading.main_thread().ident:
            return None
        with self._action_lock:
            action, self.action_pending = self.action_pending, None
        return action() if action is not None else None

    def check_now(self) -> bool:
        """Feed everything recorded so far to the checker, in this thread; only the main thread
        does (False elsewhere)."""
        if threading.get_ident() != threading.main_thread().ident:
            return False
        self.writer.flush(SYNC_CHECK_TIMEOUT_S)
        return True

    def agent_error(self, stage: str, exc: BaseException, where: str | None = None, counted: bool = True) -> None:
        """Report an error raised by the agent's own logic in ``stage`` (an inner stage the
        exception was tagged with wins): one warning per stage; ``counted`` errors go against
        the budget, past which the agent switches itself off."""
        stage = faults.stage_of(exc, stage)
        with self._error_lock:
            self.errors += counted
            over_budget = counted and self.errors > ERROR_BUDGET
        _warn_stage(stage, exc, where)
        if over_budget:
            deactivate(f"more than {ERROR_BUDGET} agent errors")

    def check_worker_role(self) -> bool:
        """In a child process: return False (and switch off) if this is a DataLoader worker."""
        self.worker_check_pending = False
        try:
            from torch.utils.data import get_worker_info
        except Exception:  # torch not importable in this child: nothing to record anyway
            return True
        if get_worker_info() is not None:
            deactivate(None)
            return False
        return True


def _warn_stage(stage: str, exc: BaseException, where: str | None) -> None:
    detail = f"{where}: " if where else ""
    text = f"{detail}{exception_text(exc)}"
    warn_once(f"agent-error:{stage}", f"agent error in {faults.label(stage)} ({text}); the training continues "
              "(further errors in this stage are counted, not shown)")
    debug(f"agent error in {faults.label(stage)}: {text}")


def report_agent_error(stage: str, exc: BaseException, where: str | None = None, counted: bool = True) -> None:
    """``agent_error`` of the active runtime; with the agent off, the warning alone."""
    rt = current
    if rt is not None:
        rt.agent_error(stage, exc, where, counted)
    else:
        _warn_stage(faults.stage_of(exc, stage), exc, where)


def active() -> Runtime:
    """The active runtime, for hooks that only run while the agent is active."""
    rt = current
    assert rt is not None
    return rt


def activate(rt: Runtime) -> None:
    global current
    current = rt


def deactivate(reason: str | None) -> None:
    """Stop recording in this process. The writer keeps what was already recorded."""
    global current
    rt, current = current, None
    if rt is not None and reason:
        warn(f"agent switched off in this process: {reason}")


def reset_thread_state_after_fork() -> None:
    """The forking thread's call stack is meaningless in the child, and so is an action the
    parent's checker asked for (the runtime's locks are renewed by ``ForkSafeLock``)."""
    thread_state.stack = []
    thread_state.busy = False
    thread_state.init_depth = 0
    rt = current
    if rt is not None:
        rt.action_pending = None
