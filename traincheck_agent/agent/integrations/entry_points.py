"""Extra agent logic attached to a few framework entry points named by policies.

``deepspeed.initialize`` and ``Accelerator.prepare`` hand the user's model to the framework,
which wraps it; registering every module that goes in or comes out as a root means the model
is known by the user's name (``model.fc1.weight``) before the first forward, whatever wrapper
the framework put around it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from traincheck_agent.agent import runtime
from traincheck_agent.agent.record.builtin_views import builtin_items
from traincheck_agent.agent.record.call_recorder import CallContext
from traincheck_agent.agent.record.naming import first_user_frame
from traincheck_agent.policy.model import FRAMEWORK_ENTRY_POINTS


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


AFTER_CALL: dict[str, Callable[[CallContext], None]] = dict.fromkeys(FRAMEWORK_ENTRY_POINTS,
                                                                     register_models_handed_over)
