"""The wrapper every instrumented API runs through, and the record it writes per call.

The order inside a wrapper matters:
1. pass straight through when the agent is off, or when the agent itself is the caller
   (``thread_state.busy``), so the agent never records its own tensor operations;
2. agent work before the call (descriptors, ``before`` state) is guarded: an error there is
   counted and reported, and the user's call still happens exactly once;
3. the user's call runs outside any try/except of ours that could change what it raises: its
   exception propagates unchanged (we only note its type);
4. agent work after the call is guarded the same way.

In check mode ``runtime.current.selection`` says which calls are recorded and at which detail
(selective instrumentation, see ``traincheck_agent.check.requirements``); a wrapper without
hooks whose call is not selected only keeps the call stack, so nesting stays as in collect mode.
The entry of a wrapped call in the main thread is also the *safe point* where a pending
``raise`` / ``abort`` action of check mode runs (before the user's call, outside our guards).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from threading import get_ident
from typing import Any

import torch

from traincheck_agent import faults
from traincheck_agent.agent import runtime
from traincheck_agent.agent.patching import TracedFunction  # noqa: F401  (re-export)
from traincheck_agent.agent.record.compiled_regions import in_compiled_region
from traincheck_agent.agent.record.descriptors import (
    NO_SIGNATURE,
    ArgSignature,
    arg_signature,
    describe,
    describe_args,
)
from traincheck_agent.policy.model import DESCRIBE_NONE
from traincheck_agent.trace.initialisers import initialises
from traincheck_agent.trace.schema import KIND_CALL
from traincheck_agent.user_tensor_hooks import hooks_off

Hook = Callable[["CallContext"], None]
# APIs under this prefix return batches: their return values are described as data.
DATA_LOADING_PREFIX = "torch.utils.data."


class CallContext:
    """What the before/after hooks of a call see."""

    __slots__ = ("call_id", "api", "instance", "args", "kwargs", "result", "exc", "step", "record",
                 "call_args", "context", "hook_state")

    def __init__(self, call_id: int, api: str, instance: Any, args: tuple, kwargs: dict, step: int) -> None:
        self.call_id = call_id
        self.api = api
        self.instance = instance
        self.args = args
        self.kwargs = kwargs
        self.result: Any = None
        self.exc: BaseException | None = None
        self.step = step
        self.record = True  # a ``before`` hook may turn recording of this call off
        # A ``before`` hook may also give the call other arguments that stand for the user's
        # (a closure that calls the user's unchanged), add to the record's ``ctx``, and keep
        # what its ``after`` hook needs.
        self.call_args: tuple[tuple, dict] | None = None
        self.context: dict[str, Any] | None = None
        self.hook_state: Any = None


def active_context(grad_enabled: bool, accumulating: bool = False) -> dict[str, Any] | None:
    """Execution context worth recording (only what is not the default)."""
    ctx: dict[str, Any] = {}
    if accumulating:
        ctx["accumulating"] = True  # a gradient-accumulation micro-step: no update at its end
    if not grad_enabled:
        ctx["grad"] = False
    if torch.is_inference_mode_enabled():
        ctx["inference"] = True
    for device in ("cpu", "cuda"):
        try:
            if torch.is_autocast_enabled(device):
                ctx["autocast"] = f"{device}:{str(torch.get_autocast_dtype(device)).replace('torch.', '')}"
        except (RuntimeError, TypeError):
            continue
    return ctx or None


def make_call_wrapper(
    api: str | Callable[[Any], str],
    *,
    args_level: str,
    returns_level: str,
    func_for_names: Callable[..., Any] | None = None,
    is_method: bool = False,
    before: Hook | None = None,
    after: Hook | None = None,
    record: bool = True,
    describe_self: bool = True,
    module_call: bool = False,
) -> Callable[..., Any]:
    """Build the wrapt wrapper function for one API.

    ``api`` is the recorded name, or a function of the instance (e.g. the module's class).
    ``before`` / ``after`` run agent logic around the call (state snapshots, clock updates);
    ``after`` runs also when the call raised (``ctx.exc`` is set), so it can undo what
    ``before`` started. ``module_call`` marks the ``nn.Module`` call probe (check mode may
    record every module call).
    """
    # Read from the signature at the first recorded call: most wrapped APIs are never called
    # in a given run, and reading a signature costs tens of microseconds.
    signature: ArgSignature | None = None
    state = runtime.thread_state
    time_ns = time.time_ns
    hookless = before is None and after is None
    default_levels = (args_level, returns_level)
    returns_batch = isinstance(api, str) and api.startswith(DATA_LOADING_PREFIX)
    # Calls made inside an initialiser or a layer's reset_parameters are marked ``in_init``: they
    # are part of that initialisation, not a second one.
    initialising = isinstance(api, str) and initialises(api)
    armed = faults.armed  # empty unless a test injects agent faults
    fire = faults.fire

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        nonlocal signature
        if in_compiled_region():  # dynamo traces this call: no recording, no graph break
            return wrapped(*args, **kwargs)
        rt = runtime.current
        if rt is None or state.busy:
            return wrapped(*args, **kwargs)
        if rt.action_pending is not None:
            violation = rt.run_pending_action()  # check mode's raise / abort, main thread only
            if violation is not None:
                raise violation
        if rt.worker_check_pending and not rt.check_worker_role():
            return wrapped(*args, **kwargs)
        levels: tuple[str, str] | None = default_levels
        selection = rt.selection
        if selection is not None:
            try:
                name = api if isinstance(api, str) else api(instance)
                levels = selection.levels(name, module_call)
            except Exception as exc:  # agent fault: the user's call still runs
                rt.agent_error("record", exc)
                return wrapped(*args, **kwargs)
            if levels is None and hookless:
                return _scope_only(rt, wrapped, args, kwargs)
        else:
            name = None

        ctx = None
        record_fields = None
        stage = "record"
        state.busy = True
        try:
            if armed:
                fire("record")
            if name is None:
                name = api if isinstance(api, str) else api(instance)
            ctx = CallContext(runtime.next_call_id(), name, instance, args, kwargs, rt.clock.step)
            if before is not None:
                before(ctx)
            ctx.step = rt.clock.step
            if record and ctx.record and levels is not None:
                a_level = levels[0]
                registry = rt.registry
                stage = "describe"
                if armed:
                    fire("describe")
                if signature is None:
                    signature = arg_signature(func_for_names, is_method) if func_for_names is not None else NO_SIGNATURE
                with hooks_off():  # attribute reads of a user's tensor subclass reach no hook of it
                    described = describe_args(signature, args, kwargs, a_level, registry.param_names,
                                              registry.module_names)
                    if describe_self and instance is not None and a_level != DESCRIBE_NONE:
                        described = {"self": describe(instance, a_level, registry.param_names, registry.module_names),
                                     **described}
                stage = "record"
                grad = torch.is_grad_enabled()
                record_fields = {
                    "kind": KIND_CALL,
                    "id": ctx.call_id,
                    "parent": state.stack[-1] if state.stack else None,
                    "thread": get_ident(),
                    "api": name,
                    "step": ctx.step,
                    "phase": rt.clock.phase(grad),
                    "args": described,
                }
                extra = active_context(grad, rt.registry.accumulating())
                if state.init_depth:
                    extra = {**(extra or {}), "in_init": True}
                if ctx.context:
                    extra = {**(extra or {}), **ctx.context}
                if extra is not None:
                    record_fields["ctx"] = extra
        except Exception as exc:  # agent fault: the user's call still runs
            rt.agent_error(stage, exc)
        finally:
            state.busy = False

        if ctx is None:
            return wrapped(*args, **kwargs)
        if ctx.call_args is not None:
            args, kwargs = ctx.call_args

        stack = state.stack
        stack.append(ctx.call_id)
        if initialising:
            state.init_depth += 1
        t0 = time_ns()
        try:
            result = wrapped(*args, **kwargs)
            ctx.result = result
        except BaseException as exc:
            ctx.exc = exc
            raise
        finally:
            t1 = time_ns()
            if initialising:
                state.init_depth -= 1
            if stack and stack[-1] == ctx.call_id:
                stack.pop()
            _epilogue(ctx, record_fields, t0, t1, levels[1] if levels is not None else DESCRIBE_NONE, after)
            # Drop our references at once: an exception's traceback would otherwise keep the
            # context (and the user's tensors in it) alive until the cyclic GC runs.
            ctx.exc = ctx.result = ctx.args = ctx.kwargs = ctx.call_args = ctx.hook_state = None  # type: ignore[assignment]  # hooks have run
        return result

    def _epilogue(ctx: CallContext, fields: dict | None, t0: int, t1: int, level: str, hook: Hook | None) -> None:
        rt = runtime.current
        if rt is None:
            return
        stage = "record"
        state.busy = True
        try:
            if hook is not None:
                hook(ctx)
            if fields is not None:
                fields["t0_ns"] = t0
                fields["t1_ns"] = t1
                fields["exc"] = type(ctx.exc).__name__ if ctx.exc is not None else None
                if level != DESCRIBE_NONE and ctx.exc is None:
                    registry = rt.registry
                    stage = "describe"
                    with hooks_off():
                        fields["ret"] = describe(ctx.result, level, registry.param_names, registry.module_names,
                                                 data=returns_batch)
                    stage = "record"
                rt.emit(fields)
            if not state.stack:
                rt.end_outermost_call()
                if rt.sync_check:
                    rt.check_now()
        except Exception as exc:
            rt.agent_error(stage, exc)
        finally:
            state.busy = False

    def _scope_only(rt: runtime.Runtime, wrapped: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """A call nobody needs recorded: it only encloses the calls made inside it."""
        stack = state.stack
        call_id = runtime.next_call_id()
        stack.append(call_id)
        if initialising:
            state.init_depth += 1
        try:
            return wrapped(*args, **kwargs)
        finally:
            if initialising:
                state.init_depth -= 1
            if stack and stack[-1] == call_id:
                stack.pop()
            if not stack:
                # Like every outermost call's end: the step may have advanced inside it.
                state.busy = True
                try:
                    rt.end_outermost_call()
                except Exception as exc:
                    rt.agent_error("record", exc)
                finally:
                    state.busy = False

    return wrapper

