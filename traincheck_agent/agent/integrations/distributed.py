"""torch.distributed and the module wrappers of torch.nn.parallel: the process group's facts
and groups when it comes up, DDP's wrapper as a root of the user's model, and, in check mode,
the end of the process group as a point where the checker catches up (its cross-rank exchange
needs the group's store)."""

from __future__ import annotations

from typing import Any

import torch

from traincheck_agent.agent import runtime
from traincheck_agent.agent.patching import wrap_attribute
from traincheck_agent.agent.process.dist_info import distributed_update
from traincheck_agent.agent.record.call_recorder import CallContext, make_call_wrapper
from traincheck_agent.agent.record.model_registry import add_wrapper_classes
from traincheck_agent.agent.record.naming import first_user_frame
from traincheck_agent.agent.runtime import SYNC_CHECK_TIMEOUT_S
from traincheck_agent.policy.model import DESCRIBE_NONE, DESCRIBE_SUMMARY

MODULES = ("torch.distributed", "torch.nn.parallel")
WRAPPER_CLASSES = ("DistributedDataParallel", "DataParallel", "FullyShardedDataParallel")


def _ddp_init_after(ctx: CallContext) -> None:
    if ctx.exc is None:
        inner = getattr(ctx.instance, "module", None)
        if isinstance(inner, torch.nn.Module):
            runtime.active().registry.register_root(ctx.instance, first_user_frame(), alias=ctx.instance)
            runtime.active().registry.ddp_wrappers.add(ctx.instance)


def _init_process_group_after(ctx: CallContext) -> None:
    if ctx.exc is None:
        rt = runtime.active()
        rt.emit(distributed_update())
        rt.probe.groups.poll(rt.clock.step)


def _destroy_process_group_before(ctx: CallContext) -> None:
    # Check mode: the checker exchanges cross-rank halves through the process group's store;
    # let it catch up while the group still exists (it runs in this thread, once per run).
    runtime.active().writer.flush(SYNC_CHECK_TIMEOUT_S)


def install(module: Any) -> None:
    """Called when ``torch.distributed`` or ``torch.nn.parallel`` is imported."""
    add_wrapper_classes(WRAPPER_CLASSES)
    if getattr(module, "__name__", "") == "torch.distributed" and hasattr(module, "init_process_group"):
        wrap_attribute(module, "init_process_group", make_call_wrapper(
            "torch.distributed.init_process_group", args_level=DESCRIBE_SUMMARY,
            returns_level=DESCRIBE_NONE, func_for_names=module.init_process_group,
            after=_init_process_group_after,
        ))
    rt = runtime.current
    if rt is not None and rt.selection is not None and hasattr(module, "destroy_process_group"):
        wrap_attribute(module, "destroy_process_group", make_call_wrapper(
            "torch.distributed.destroy_process_group", args_level=DESCRIBE_SUMMARY,
            returns_level=DESCRIBE_NONE, func_for_names=module.destroy_process_group,
            before=_destroy_process_group_before,
        ))
    ddp = getattr(module, "DistributedDataParallel", None)
    if isinstance(ddp, type):
        wrap_attribute(ddp, "__init__", make_call_wrapper(
            "torch.nn.parallel.DistributedDataParallel.__init__", args_level=DESCRIBE_SUMMARY,
            returns_level=DESCRIBE_NONE, func_for_names=vars(ddp)["__init__"], is_method=True,
            after=_ddp_init_after, describe_self=False,
        ))
