"""torch itself: the core probes that every mode needs, whatever the policy lists.

They drive the training clock (step, phase), find models and optimizers, and take the state
snapshots the policy asks for around optimizer steps, ``zero_grad``, ``backward`` and
``Module.train``. Optimizer ``step`` / ``zero_grad`` are wrapped per optimizer class when the
first instance is built (``Optimizer.__init__`` is seen for every optimizer, user-defined ones
included), after torch has installed its own step hook, so ours is the outermost.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from traincheck_agent.agent import runtime
from traincheck_agent.agent.patching import is_traced, on_import, wrap_attribute
from traincheck_agent.agent.record.api_names import defining_class, public_class_name
from traincheck_agent.agent.record.call_recorder import CallContext, make_call_wrapper
from traincheck_agent.agent.record.compiled_regions import is_compiled_module, watch_compilation
from traincheck_agent.agent.record.descriptors import note_parameter
from traincheck_agent.agent.record.model_registry import add_wrapper_classes
from traincheck_agent.agent.record.naming import first_user_frame
from traincheck_agent.agent.record.step_closure import ClosureWatch, closure_argument
from traincheck_agent.fingerprint import fingerprint_tensors
from traincheck_agent.policy.model import DESCRIBE_NONE, DESCRIBE_SUMMARY
from traincheck_agent.trace.schema import KIND_NOTE

_depths = runtime.thread_state  # per-thread counters live next to the call stack


def _enter(kind: str) -> bool:
    """Count one more open call of ``kind`` on this thread; True if it is the outermost."""
    depth = getattr(_depths, kind, 0)
    setattr(_depths, kind, depth + 1)
    return depth == 0


def _open_calls(kind: str) -> int:
    """How many calls of ``kind`` are open on this thread."""
    depth: int = getattr(_depths, kind, 0)
    return depth


def _leave(kind: str) -> bool:
    depth = getattr(_depths, kind, 1) - 1
    setattr(_depths, kind, max(depth, 0))
    return depth <= 0


# -- nn.Module ------------------------------------------------------------------------------
def _module_api(instance: Any) -> str:
    cls = type(instance)
    if is_compiled_module(instance):
        # torch.compile's wrapper is recorded as the model it compiles, so that invariants learned
        # with and without compilation name the same call.
        inner = getattr(instance, "_orig_mod", None)
        if isinstance(inner, torch.nn.Module):
            cls = type(inner)
    return f"{public_class_name(cls)}.forward"


def _module_before(ctx: CallContext) -> None:
    module = ctx.instance
    if is_compiled_module(module):
        _enter("compiled_module_calls")
    elif getattr(_depths, "compiled_module_calls", 0) and isinstance(module, torch.fx.GraphModule):
        # The enclosing compiled module's own code, run by its backend (e.g. aot_eager): a call
        # inside the compiled region, not one of the model's.
        ctx.record = False
    if not _enter("module_calls"):
        return
    rt = runtime.active()
    if not rt.registry.knows_module(module):
        rt.registry.register_root(module, first_user_frame())
    rt.registry.note_thread(module)
    rt.clock.model_training = module.training
    if module.training and torch.is_grad_enabled():
        rt.clock.start_training()
        _manual_boundary(rt)


def _module_after(ctx: CallContext) -> None:
    if is_compiled_module(ctx.instance):
        _leave("compiled_module_calls")
    _leave("module_calls")


def _train_before(ctx: CallContext) -> None:
    # Module.train recurses into every child; the outermost call is the user's action, the
    # children's modes are captured by the state snapshot after it.
    ctx.record = _enter("train_calls")


def _train_after(ctx: CallContext) -> None:
    if not _leave("train_calls") or ctx.exc is not None:
        return
    rt = runtime.active()
    module = ctx.instance
    if rt.registry.root_name_of(module) is not None or not rt.registry.knows_module(module):
        rt.clock.model_training = module.training
    rt.probe.snapshot("after", "module.train", ctx.call_id, module=module)


# -- optimizers -----------------------------------------------------------------------------
def _name_optimizer(opt: Any) -> None:
    registry = runtime.active().registry
    if not registry.has_optimizer_name(opt):
        registry.optimizer_name(opt, first_user_frame())


# Tests, added by other integrations, of whether an optimizer's step or ``zero_grad`` leaves
# the parameters alone on this call (a wrapper's micro-step of gradient accumulation).
MICRO_STEP_TESTS: list[Callable[[Any], bool]] = []


def _skips_update(optimizer: Any) -> bool:
    return any(test(optimizer) for test in MICRO_STEP_TESTS)


def _skipped_calls() -> list[bool]:
    stack = getattr(_depths, "skipped_calls", None)
    if stack is None:
        stack = _depths.skipped_calls = []
    return stack


def enter_skippable(skipped: bool) -> bool:
    """Note whether this step-like call is a no-op micro-step call (its ``after`` hook asks
    ``leave_skippable``); returns ``skipped``."""
    _skipped_calls().append(skipped)
    return skipped


def leave_skippable() -> bool:
    stack = _skipped_calls()
    return bool(stack) and stack.pop()


def begin_training_step(ctx: CallContext, closure: Callable[..., Any] | None = None, **scope: Any) -> None:
    """The start of a training step (an optimizer's step, a DeepSpeed engine's): the ``before``
    snapshots of ``scope`` (``optimizer=`` or ``module=``) if it is the outermost one. A step
    given a ``closure`` runs the iteration's forward and backward inside it: its ``before``
    snapshots wait until the closure first returns (``step_closure``)."""
    outermost = _enter("optimizer_steps")
    rt = runtime.active()
    rt.clock.start_training()
    if not outermost:
        return
    if closure is None:
        rt.probe.snapshot("before", "optimizer.step", ctx.call_id, **scope)
        return
    watch = ClosureWatch(ctx.call_id, scope)
    ctx.hook_state = watch
    ctx.context = {"closure": True}
    ctx.call_args = watch.arguments(ctx.args, ctx.kwargs, closure)


def end_training_step(ctx: CallContext, **scope: Any) -> None:
    """Its end: the ``after`` snapshots, and the step clock advances."""
    if not _leave("optimizer_steps") or ctx.exc is not None:
        if isinstance(ctx.hook_state, ClosureWatch):
            ctx.hook_state.close()
        return
    rt = runtime.active()
    extra = ctx.hook_state.close() if isinstance(ctx.hook_state, ClosureWatch) else None
    rt.probe.snapshot("after", "optimizer.step", ctx.call_id, extra=extra, **scope)
    rt.clock.optimizer_step_finished(ctx.instance)


def _step_before(ctx: CallContext) -> None:
    if enter_skippable(_skips_update(ctx.instance)):
        return  # a micro-step: no update, no snapshots, the step clock stays
    _name_optimizer(ctx.instance)
    begin_training_step(ctx, closure_argument(ctx.args, ctx.kwargs), optimizer=ctx.instance)


def _step_after(ctx: CallContext) -> None:
    if not leave_skippable():
        end_training_step(ctx, optimizer=ctx.instance)


def _zero_grad_before(ctx: CallContext) -> None:
    if enter_skippable(_skips_update(ctx.instance)):
        return  # Accelerate keeps the accumulated gradients: nothing is cleared
    outermost = _enter("zero_grads")
    runtime.active().clock.start_training()
    if outermost:
        _manual_boundary(runtime.active())
    target = ctx.instance
    is_optimizer = isinstance(target, torch.optim.Optimizer)
    if is_optimizer:
        _name_optimizer(target)
    if outermost:
        runtime.active().probe.snapshot("before", "zero_grad", ctx.call_id,
                             optimizer=target if is_optimizer else None,
                             module=None if is_optimizer else target)


def _zero_grad_after(ctx: CallContext) -> None:
    if leave_skippable():
        return
    if not _leave("zero_grads") or ctx.exc is not None:
        return
    target = ctx.instance
    is_optimizer = isinstance(target, torch.optim.Optimizer)
    runtime.active().probe.snapshot("after", "zero_grad", ctx.call_id,
                         optimizer=target if is_optimizer else None,
                         module=None if is_optimizer else target)


def _wrap_optimizer_method(cls: type, attr: str, before: Any, after: Any) -> None:
    owner = defining_class(cls, attr)
    if owner is None or owner is object or is_traced(vars(owner)[attr]):
        return
    wrapper = make_call_wrapper(
        f"{public_class_name(owner)}.{attr}",
        args_level=DESCRIBE_SUMMARY,
        returns_level=DESCRIBE_NONE,
        before=before,
        after=after,
    )
    wrap_attribute(owner, attr, wrapper)


def _register_parameter_after(ctx: CallContext) -> None:
    """Remember where a module's parameter lives, so that its ``.data`` is known as it."""
    if ctx.exc is None:
        param = ctx.args[1] if len(ctx.args) > 1 else ctx.kwargs.get("param")
        if isinstance(param, torch.Tensor):
            note_parameter(param)


def _optimizer_init_after(ctx: CallContext) -> None:
    if ctx.exc is not None:
        return
    opt = ctx.instance
    rt = runtime.active()
    params = [p for group in opt.param_groups for p in group.get("params", ()) if isinstance(p, torch.Tensor)]
    rt.registry.register_roots_for_params(params, first_user_frame())
    _wrap_optimizer_method(type(opt), "step", _step_before, _step_after)
    _wrap_optimizer_method(type(opt), "zero_grad", _zero_grad_before, _zero_grad_after)


# -- backward -------------------------------------------------------------------------------
def _backward_before(ctx: CallContext) -> None:
    outermost = _enter("backwards")
    rt = runtime.active()
    rt.clock.start_training()
    if outermost:
        _manual_boundary(rt)
        rt.probe.snapshot("before", "backward", ctx.call_id)


def _backward_after(ctx: CallContext) -> None:
    if _leave("backwards") and ctx.exc is None:
        rt = runtime.active()
        rt.probe.snapshot("after", "backward", ctx.call_id)
        if rt.clock.watches_manual_updates:
            global _update_witness
            _update_witness = None
            rt.clock.backward_finished(_parameter_versions(rt))


# -- loops that update parameters by hand (see ``clock``) -------------------------------------
_update_witness: Any = None  # a parameter that had a grad when the last backward ended (weakref)


def _parameter_versions(rt: Any) -> tuple[int, str | None]:
    """What changes when the root models' parameters are updated in place: the total of their
    version counters (an update under ``no_grad``, an optimizer's), and the hash of one
    parameter that has a grad (an update through ``.data``, which moves no counter)."""
    global _update_witness
    total = 0
    witness = _update_witness() if _update_witness is not None else None
    for _, root in rt.registry.roots():
        for param in root.parameters():
            total += param._version
            if witness is None and param.grad is not None:
                witness = param
                _update_witness = weakref.ref(param)
    digest = fingerprint_tensors([witness])[0].get("h") if witness is not None else None
    return total, digest


def _manual_boundary(rt: Any) -> None:
    """The next iteration's work begins: in a loop without an optimizer whose parameters were
    updated by hand since the last backward, finish that backward's step now (this call is the
    next step's), and say once which boundary the steps follow."""
    clock = rt.clock
    if not clock.awaits_manual_update or _open_calls("optimizer_steps"):
        return  # inside an optimizer step (its closure), updates are the optimizer's
    first = not clock.counts_manual_updates
    if clock.next_work_begins(_parameter_versions(rt)):
        if first:
            rt.emit({"kind": KIND_NOTE, "what": "step_boundary", "boundary": "manual_update",
                     "step": clock.step})
        rt.end_outermost_call()


WRAPPER_CLASSES = ("OptimizedModule",)  # torch.compile's


def install(_torch: Any) -> None:
    """Wrap the torch entry points the clock, the registry and the state probe rely on."""
    policy = runtime.active().policy
    add_wrapper_classes(WRAPPER_CLASSES)
    on_import("torch._dynamo", watch_compilation)
    module_cls = torch.nn.Module
    wrap_attribute(module_cls, "__call__", make_call_wrapper(
        _module_api, args_level=DESCRIBE_SUMMARY, returns_level=DESCRIBE_SUMMARY,
        before=_module_before, after=_module_after, record=policy.record_module_calls, module_call=True,
    ))
    wrap_attribute(module_cls, "train", make_call_wrapper(
        "torch.nn.Module.train", args_level=DESCRIBE_SUMMARY, returns_level=DESCRIBE_NONE,
        func_for_names=module_cls.train, is_method=True, before=_train_before, after=_train_after,
    ))
    wrap_attribute(module_cls, "zero_grad", make_call_wrapper(
        "torch.nn.Module.zero_grad", args_level=DESCRIBE_SUMMARY, returns_level=DESCRIBE_NONE,
        func_for_names=module_cls.zero_grad, is_method=True,
        before=_zero_grad_before, after=_zero_grad_after,
    ))
    wrap_attribute(module_cls, "register_parameter", make_call_wrapper(
        "torch.nn.Module.register_parameter", args_level=DESCRIBE_NONE, returns_level=DESCRIBE_NONE,
        after=_register_parameter_after, record=False,
    ))
    wrap_attribute(torch.optim.Optimizer, "__init__", make_call_wrapper(
        "torch.optim.Optimizer.__init__", args_level=DESCRIBE_NONE, returns_level=DESCRIBE_NONE,
        after=_optimizer_init_after, record=False,
    ))
    wrap_attribute(torch.Tensor, "backward", make_call_wrapper(
        "torch.Tensor.backward", args_level=DESCRIBE_SUMMARY, returns_level=DESCRIBE_NONE,
        func_for_names=torch.Tensor.backward, is_method=True,
        before=_backward_before, after=_backward_after,
    ))
    wrap_attribute(torch.autograd, "backward", make_call_wrapper(
        "torch.autograd.backward", args_level=DESCRIBE_SUMMARY, returns_level=DESCRIBE_NONE,
        func_for_names=torch.autograd.backward,
        before=_backward_before, after=_backward_after,
    ))
