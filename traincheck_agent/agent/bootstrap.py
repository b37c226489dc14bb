"""Start the agent in this process: called by the startup hook when TRAINCHECK_MODE is set.

Decides the process role first (launchers, tools and compile workers are left alone; launchers
only hand a shared run id to the ranks they start), then loads the policies and registers
post-import hooks. Nothing of torch is imported here: the probes are installed when the
training script imports torch, whenever that happens.

Check mode loads the invariants first (``TRAINCHECK_INV``), cuts the policy down to what they
need (``traincheck_agent.check.requirements``) and gives the trace writer the online checker as
its sink; the trace file itself is written only with ``TRAINCHECK_CHECK_TRACE=1``.
"""

from __future__ import annotations

import atexit
import importlib
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import traincheck_agent
from traincheck_agent.agent import runtime
from traincheck_agent.agent.patching import on_import
from traincheck_agent.agent.process.role import ProcessRole, classify
from traincheck_agent.exception_text import exception_text
from traincheck_agent.fork_safety import on_fork_in_child
from traincheck_agent.messages import debug, warn
from traincheck_agent.policy import load_policies
from traincheck_agent.policy.loader import default_policy_files
from traincheck_agent.settings import LAUNCHER_RUN_ID, Settings
from traincheck_agent.trace.schema import KIND_HEADER, SCHEMA_VERSION

_started = False
# Hooks of modules that finish importing while torch itself is still importing run before the
# agent can be active; they wait here until it is.
_waiting: list[Any] = []


def when_active(action: Any) -> None:
    if runtime.current is not None:
        action()
    else:
        _waiting.append(action)


def _run_waiting() -> None:
    while _waiting:
        _waiting.pop(0)()


def _header(settings: Settings, policy_sources: tuple[str, ...], policy_digest: str) -> dict[str, Any]:
    from traincheck_agent.agent.process.dist_info import process_facts

    versions = {"python": platform.python_version(), "agent": traincheck_agent.__version__}
    for name in VERSIONS_REPORTED:
        mod = sys.modules.get(name)
        if mod is not None:
            versions[name] = getattr(mod, "__version__", "?")
    try:
        from traincheck_agent.fingerprint import ALGORITHMS

        algorithms = dict(ALGORITHMS)
    except Exception:
        algorithms = {}
    header = {
        "kind": KIND_HEADER,
        "schema": SCHEMA_VERSION,
        "run_id": settings.run_id,
        **process_facts(),
        "host": settings.host,
        "pid": os.getpid(),
        "mode": settings.mode,
        "started_ns": time.time_ns(),
        "argv": list(getattr(sys, "orig_argv", sys.argv))[:32],
        "versions": versions,
        "policies": [os.path.basename(s) for s in policy_sources],
        "policy_digest": policy_digest,
        "fingerprint_algorithms": algorithms,
    }
    if settings.mode == "check":
        header["invariants"] = [os.path.basename(str(f)) for f in settings.invariant_files]
    return header


def _after_fork_in_child() -> None:
    runtime.reset_thread_state_after_fork()
    rt = runtime.current
    if rt is not None:
        rt.pid = os.getpid()
        rt.worker_check_pending = True


# The framework integrations (``agent.integrations``): each module's ``install(module)`` runs
# once the agent is active, when any of the modules listed for it finishes importing. torch's
# own runs first, when the runtime is built; the others are registered before the policies'
# hooks, so that their core probes are the outermost wrappers whatever a policy lists.
INTEGRATIONS: dict[str, tuple[str, ...]] = {
    "distributed": ("torch.distributed", "torch.nn.parallel"),
    "deepspeed": ("deepspeed", "deepspeed.runtime.engine"),
    "accelerate": ("accelerate.accelerator",),
}
VERSIONS_REPORTED = ("torch", "deepspeed", "accelerate", "transformers")


def _install_integration(name: str, module: Any) -> None:
    """Run integration ``name``'s ``install(module)``; a failure of torch's switches the agent
    off (nothing can be recorded without it), any other is one warning."""
    if runtime.current is None:
        return
    try:
        importlib.import_module(f"traincheck_agent.agent.integrations.{name}").install(module)
    except Exception as exc:
        if name == "torch":
            runtime.deactivate(f"cannot instrument torch ({exception_text(exc)})")
        else:
            warn(f"cannot instrument {module.__name__} ({exception_text(exc)})")


def _on_import(name: str) -> Callable[[Any], None]:
    """A post-import hook that installs integration ``name`` once the agent is active."""
    return lambda module: when_active(lambda: _install_integration(name, module))


def _debug_figures(mode: str) -> None:
    from traincheck_agent.agent import patching

    debug(f"{mode} mode: {patching.wrapped_count} APIs wrapped")


def start(mode: str) -> None:
    """Activate the agent for ``mode`` ('collect' or 'check'); idempotent."""
    global _started
    if _started:
        return
    _started = True
    settings = Settings.from_env(mode=mode)
    from traincheck_agent import faults

    for problem in faults.problems:
        warn(problem)
    role, reason = classify(extra_skip=settings.skip_programs)
    if role is ProcessRole.LAUNCHER:
        # Every rank this launcher starts inherits the same run id.
        if not os.environ.get("TRAINCHECK_RUN_ID"):
            os.environ["TRAINCHECK_RUN_ID"] = os.environ[LAUNCHER_RUN_ID] = settings.run_id
        debug(f"launcher process ({reason}): run id {os.environ['TRAINCHECK_RUN_ID']}")
        return
    if role in (ProcessRole.TOOL, ProcessRole.COMPILE_WORKER):
        debug(f"not instrumenting this process ({role.name.lower()}: {reason})")
        return
    # Processes this one starts (torch.multiprocessing spawn, subprocess) belong to the same run.
    os.environ.setdefault("TRAINCHECK_RUN_ID", settings.run_id)
    install(settings, role)


def install(settings: Settings, role: ProcessRole, *, process_hooks: bool = True) -> Any:
    """Build the agent for ``settings`` in this process: load the policies (and, in check mode,
    the invariants), make the trace writer, and register the post-import hooks that build the
    runtime when torch is imported (at once, if it already is). Returns the writer, or None when
    check mode has nothing to check (a warning said why).

    ``process_hooks`` (the startup hook's case) also registers what outlives the agent and
    cannot be taken back: the flush at exit and on SIGTERM, and the debug figures at exit.
    ``agent.in_process`` passes False, so that ``patching.uninstall`` leaves the process as it
    found it."""
    mode = settings.mode
    files = (default_policy_files() if settings.use_default_policies else []) + list(settings.policy_files)
    policy, _problems = load_policies(files, report=lambda problem: warn(str(problem)), cache_dir=settings.cache_dir)

    check = None
    if mode == "check":
        from traincheck_agent.agent.checking.check_mode import CLOSE_TIMEOUT_S, prepare_check

        check = prepare_check(settings, policy)
        if check is None:  # the warning said why
            return None
        policy = check.policy
        if role is ProcessRole.SPAWN_CHILD:
            check.sink.checker_kind = "thread"  # a worker of the training process: no child of its own
        else:
            check.sink.start_process()

    from traincheck_agent.agent.record.clock import TrainingClock
    from traincheck_agent.agent.record.trace_writer import TraceWriter, install_flush_on_exit

    sources, digest = policy.sources, policy.digest
    writer = TraceWriter(
        settings.out_dir,
        lambda: _header(settings, sources, digest),
        flush_interval_s=settings.flush_interval_s,
        flush_max_records=settings.flush_max_records,
        write_file=check is None or settings.check_trace,
        sink=check.sink if check is not None else None,
        close_timeout_s=CLOSE_TIMEOUT_S if check is not None else 5.0,
        max_bytes=settings.max_trace_bytes,
    )
    if check is not None:
        check.sink.writer = writer
    if process_hooks:
        install_flush_on_exit(writer)

    def activate_with_torch(torch_module: Any) -> None:
        # The registry and the probe need torch; build them once it is imported.
        # Import every agent module that needs torch *before* activating: importing them can
        # finish imports that fire other post-import hooks, which must find them complete.
        from traincheck_agent.agent import policy_patcher  # noqa: F401
        from traincheck_agent.agent.integrations import torch as _torch_integration  # noqa: F401
        from traincheck_agent.agent.record.model_registry import ModelRegistry
        from traincheck_agent.agent.record.state_probe import StateProbe

        clock = TrainingClock()
        registry = ModelRegistry()
        probe = StateProbe(policy, registry, clock, writer.emit)
        switches = None if check is None else runtime.CheckSwitches(
            check.selection, sync_check=settings.action != "log",
            check_at_step_end=check.sink.checker_kind == "thread")
        rt = runtime.Runtime(settings, policy, writer, clock, registry, probe, switches,
                             worker_check_pending=role is ProcessRole.SPAWN_CHILD)
        runtime.activate(rt)
        _install_integration("torch", torch_module)
        _run_waiting()

    on_fork_in_child("runtime", _after_fork_in_child)  # by name: registering again replaces it
    if process_hooks:
        atexit.register(_debug_figures, mode)
    on_import("torch", activate_with_torch)
    for name, modules in INTEGRATIONS.items():
        for module_name in modules:
            on_import(module_name, _on_import(name))
    from traincheck_agent.agent.policy_patcher import install_policy_hooks

    install_policy_hooks(policy, when_active)
    debug(f"{mode} mode active (run {settings.run_id}, policies: {', '.join(policy.sources)})")
    return writer
