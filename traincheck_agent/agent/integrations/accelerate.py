"""Hugging Face Accelerate: ``Accelerator.prepare`` hands over the user's model, and the
optimizer it returns skips the update off the accumulation boundary."""

from __future__ import annotations

from typing import Any

from traincheck_agent.agent.integrations import torch as torch_integration
from traincheck_agent.agent.integrations.entry_points import wrap_entry_point

MODULES = ("accelerate.accelerator",)
ENTRY_POINTS = ("prepare", "prepare_model")


def skips_update(optimizer: Any) -> bool:
    """Accelerate's optimizer inside ``accumulate()`` off the accumulation boundary: it steps the
    torch optimizer (and clears the grads) only when the gradients are synchronised."""
    state = getattr(optimizer, "gradient_state", None)
    return state is not None and getattr(state, "sync_gradients", True) is False


def install(module: Any) -> None:
    """Called when ``accelerate.accelerator`` is imported."""
    if skips_update not in torch_integration.MICRO_STEP_TESTS:
        torch_integration.MICRO_STEP_TESTS.append(skips_update)
    accelerator = getattr(module, "Accelerator", None)
    if isinstance(accelerator, type):
        for attr in ENTRY_POINTS:
            wrap_entry_point(accelerator, attr, f"{module.__name__}.Accelerator.{attr}")
