"""DeepSpeed: ``deepspeed.initialize`` hands over the user's model, its engines wrap it, and
the engine's step is the training step.

Under ZeRO the torch optimizer that DeepSpeed steps holds only this rank's flat fp32 partition,
and the model's parameters are written by an all-gather after it; the user's step is
``engine.step()``. So the engine's ``step`` is probed like an optimizer step: the snapshots
around it are of the engine's module (every parameter, by the user's names, equal on every
rank afterwards) with the hyper-parameters and settings of the optimizer the engine steps
(ZeRO's: a rank that clips its partition differently leaves the gathered weights equal, but not
its settings), the inner optimizer's step nests inside it and takes none of its own, and the
step clock advances when it returns. Micro-steps of gradient accumulation (``step`` called
off the accumulation boundary, where DeepSpeed does not update) are not steps.
"""

from __future__ import annotations

from typing import Any

from traincheck_agent.agent import runtime
from traincheck_agent.agent.integrations.entry_points import wrap_entry_point
from traincheck_agent.agent.integrations.torch import (
    begin_training_step,
    end_training_step,
    enter_skippable,
    leave_skippable,
)
from traincheck_agent.agent.patching import wrap_attribute
from traincheck_agent.agent.record.call_recorder import CallContext, make_call_wrapper
from traincheck_agent.agent.record.model_registry import add_wrapper_classes
from traincheck_agent.policy.model import DESCRIBE_NONE, DESCRIBE_SUMMARY

MODULES = ("deepspeed", "deepspeed.runtime.engine")
WRAPPER_CLASSES = ("DeepSpeedEngine", "PipelineEngine")
ENGINE_STEP = "deepspeed.runtime.engine.DeepSpeedEngine.step"


def _at_boundary(engine: Any) -> bool:
    try:
        return bool(engine.is_gradient_accumulation_boundary())
    except Exception:  # an engine without the method: every step is a step
        return True


def _optimizer_of(engine: Any) -> Any:
    """The optimizer the engine steps (ZeRO's, which holds the clipping and partitioning
    settings), for its hyper-parameters and settings."""
    return getattr(engine, "optimizer", None)


def _engine_step_before(ctx: CallContext) -> None:
    runtime.active().registry.accumulators.add(ctx.instance)  # its micro-steps are marked in call records
    if enter_skippable(not _at_boundary(ctx.instance)):
        return  # a micro-step: DeepSpeed accumulates, nothing is updated
    begin_training_step(ctx, module=ctx.instance.module, hyperparams_of=_optimizer_of(ctx.instance))


def _engine_step_after(ctx: CallContext) -> None:
    if not leave_skippable():
        end_training_step(ctx, module=ctx.instance.module, hyperparams_of=_optimizer_of(ctx.instance))


def install(module: Any) -> None:
    """Called when ``deepspeed`` and ``deepspeed.runtime.engine`` are imported."""
    if module.__name__ == "deepspeed":
        wrap_entry_point(module, "initialize", "deepspeed.initialize")
        return
    add_wrapper_classes(WRAPPER_CLASSES)
    engine = getattr(module, "DeepSpeedEngine", None)
    if isinstance(engine, type) and "step" in vars(engine):
        wrap_attribute(engine, "step", make_call_wrapper(
            ENGINE_STEP, args_level=DESCRIBE_SUMMARY, returns_level=DESCRIBE_NONE,
            func_for_names=vars(engine)["step"], is_method=True, before=_engine_step_before, after=_engine_step_after,
        ))
