"""The framework entry points that hand the user's model to the framework.

``deepspeed.initialize`` and ``Accelerator.prepare`` take the user's model and wrap it;
registering every module that goes in or comes out as a root means the model is known by the
user's name (``model.fc1.weight``) before the first forward, whatever wrapper the framework put
around it. The integrations wrap their entry points here, whatever the policies list; a policy
that also names one records it through the same wrapper.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from traincheck_agent.agent import runtime
from traincheck_agent.agent.patching import wrap_attribute
from traincheck_agent.agent.record.builtin_views import builtin_items
from traincheck_agent.agent.record.call_recorder import CallContext, make_call_wrapper
from traincheck_agent.agent.record.naming import first_user_frame
from traincheck_agent.policy.model import DESCRIBE_SUMMARY


def _modules_in(values: Any) -> Iterator[torch.nn.Module]:
    for value in values:
        if issubclass(type(value), torch.nn.Module):
            yield value
        elif issubclass(type(value), (tuple, list)):
            yield from (v for v in builtin_items(value) if issubclass(type(v), torch.nn.Module))


def _accumulates(obj: Any) -> bool:
    """A DeepSpeed engine or an Accelerator: it knows whether this micro-step will update."""
    return hasattr(obj, "is_gradient_accumulation_boundary") or hasattr(type(obj), "sync_gradients")


def register_models_handed_over(ctx: CallContext) -> None:
    rt = runtime.current
    if rt is None or ctx.exc is not None:
        return
    frame = first_user_frame()
    handed = list(_modules_in([*ctx.args, *ctx.kwargs.values(), ctx.result]))
    for module in handed:
        rt.registry.register_root(module, frame)
    for engine in (ctx.instance, *handed):
        if engine is not None and _accumulates(engine):
            rt.registry.accumulators.add(engine)


def wrap_entry_point(owner: Any, attr: str, api: str) -> None:
    """Wrap ``owner.attr`` (recorded as ``api``) so that the models it is handed are registered."""
    func = vars(owner).get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
    if func is None:
        return
    wrap_attribute(owner, attr, make_call_wrapper(
        api, args_level=DESCRIBE_SUMMARY, returns_level=DESCRIBE_SUMMARY, func_for_names=func,
        is_method=isinstance(owner, type), after=register_models_handed_over,
    ))
