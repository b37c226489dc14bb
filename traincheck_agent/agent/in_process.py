"""Start the agent inside a process that is already running (torch imported or not), and take
it out again: what the test suite uses to instrument its own process.

``start_in_process`` builds the agent exactly as the startup hook does (``bootstrap.install``),
from a mapping of ``TRAINCHECK_*`` values instead of the environment, and with the process
treated as a training process. It leaves out what cannot be taken back: the flush at exit (an
``atexit`` handler) and the SIGTERM flush (a signal handler, a wakeup fd and a watcher thread,
armed by the writer only for writers that flush at exit), so ``stop_in_process`` leaves the
process as it found it:

- every wrapped attribute is restored (``patching.uninstall``), the post-import hooks the agent
  registered become no-ops, hooks waiting for the agent to become active are dropped;
- the runtime is switched off and the writer closed (its thread joined, its file closed, a
  check-mode sink's checker closed with it);
- this thread's call-stack state and the agent's per-process caches (parameter addresses,
  once-only warnings) are cleared.

What stays: wrapt's import finder on ``sys.meta_path`` and the dead hooks in its table, the
runtime's after-fork hook in ``fork_safety``'s list (it does nothing while the agent is off), and
the process's ``TRAINCHECK_RUN_ID`` if the caller set one. Faults (``TRAINCHECK_INJECT_FAULT``) are read from
the real environment when ``traincheck_agent.faults`` is first imported, not from ``env``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from traincheck_agent.agent import bootstrap, patching, runtime
from traincheck_agent.agent.process.role import ProcessRole
from traincheck_agent.settings import Settings

_writer: Any = None
_active = False


def start_in_process(mode: str, env: Mapping[str, str]) -> Any:
    """Activate the agent for ``mode`` in this process with the settings ``env`` gives (the
    ``TRAINCHECK_*`` variables; the process environment is not read). Returns the trace
    writer, or None when check mode found nothing to check (a warning said why)."""
    global _writer, _active
    if _active or bootstrap._started or runtime.current is not None:
        raise RuntimeError("the agent is already active in this process")
    settings = Settings.from_env(env, mode=mode)
    _active = True
    try:
        _writer = bootstrap.install(settings, ProcessRole.TRAINING, process_hooks=False)
    except BaseException:
        stop_in_process()
        raise
    return _writer


def stop_in_process() -> None:
    """Switch the agent off, restore everything it wrapped and close its writer."""
    global _writer, _active
    runtime.deactivate(None)
    patching.uninstall()
    bootstrap._waiting.clear()
    writer, _writer = _writer, None
    if writer is not None:
        writer.close()
    _reset_process_state()
    _active = False


def _reset_process_state() -> None:
    from traincheck_agent import messages

    state = runtime.thread_state
    for name in list(vars(state)):  # the torch integration keeps its depth counters here too
        delattr(state, name)
    runtime.reset_thread_state_after_fork()  # the call stack, the busy flag, the init depth
    with messages._seen_lock:
        messages._seen.clear()
    descriptors = sys.modules.get("traincheck_agent.agent.record.descriptors")
    if descriptors is not None:
        descriptors._parameters_at.clear()
    torch_integration = sys.modules.get("traincheck_agent.agent.integrations.torch")
    if torch_integration is not None:
        setattr(torch_integration, "_update_witness", None)  # noqa: B010  (a module attribute)
