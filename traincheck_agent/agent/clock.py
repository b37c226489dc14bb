"""Training step and phase, derived from the framework calls the agent sees.

``step`` is the 0-based training iteration: -1 before training starts, 0 from the first
``zero_grad``, training-mode forward (grad enabled), backward or optimizer step, and +1 each time the *clock optimizer* (the first
optimizer that completes a step) finishes a step. The advance is applied when the outermost
recorded call containing that step returns, so the step call itself and the state recorded
around it belong to the iteration they finish.
"""

from __future__ import annotations

from traincheck_agent.trace.schema import PHASE_EVAL, PHASE_INIT, PHASE_TRAIN


class TrainingClock:
    def __init__(self) -> None:
        self.step = -1
        self.model_training = True
        self._clock_optimizer: int | None = None
        self._advance_pending = False

    @property
    def started(self) -> bool:
        return self.step >= 0

    def start_training(self) -> None:
        if self.step < 0:
            self.step = 0

    def optimizer_step_finished(self, optimizer: object) -> None:
        if self._clock_optimizer is None:
            self._clock_optimizer = id(optimizer)
        if id(optimizer) == self._clock_optimizer:
            self._advance_pending = True

    def advance_if_pending(self) -> bool:
        """Apply a finished step, if one is pending; True when the step advanced."""
        if self._advance_pending:
            self._advance_pending = False
            self.step += 1
            return True
        return False

    def phase(self, grad_enabled: bool) -> str:
        if self.step < 0:
            return PHASE_INIT
        if not grad_enabled or not self.model_training:
            return PHASE_EVAL
        return PHASE_TRAIN
