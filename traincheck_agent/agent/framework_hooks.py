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
from traincheck_agent.agent.call_recorder import CallContext
from traincheck_agent.agent.naming import first_user_frame


def _modules_in(values: Any) -> Iterator[torch.nn.Module]:
    for value in values:
        if isinstance(value, torch.nn.Module):
            yield value
        elif isinstance(value, (tuple, list)):
            yield from (v for v in value if isinstance(v, torch.nn.Module))


def register_models_handed_over(ctx: CallContext) -> None:
    rt = runtime.current
    if rt is None or ctx.exc is not None:
        return
    frame = first_user_frame()
    for module in _modules_in([*ctx.args, *ctx.kwargs.values(), ctx.result]):
        rt.registry.register_root(module, frame)


AFTER_CALL: dict[str, Callable[[CallContext], None]] = {
    "deepspeed.initialize": register_models_handed_over,
    "accelerate.accelerator.Accelerator.prepare": register_models_handed_over,
    "accelerate.accelerator.Accelerator.prepare_model": register_models_handed_over,
}
