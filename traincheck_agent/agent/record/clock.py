"""Training step and phase, derived from the framework calls the agent sees.

``step`` is the 0-based training iteration: -1 before training starts, 0 from the first
``zero_grad``, training-mode forward (grad enabled), backward or optimizer step, and +1 each time the *clock optimizer* (the first
optimizer that completes a step) finishes a step. The advance is applied when the outermost
recorded call containing that step returns, so the step call itself and the state recorded
around it belong to the iteration they finish. Another optimizer takes over the clock when the
clock optimizer is gone or silent: garbage-collected, or while another finished two steps
without it (an optimizer re-created mid-run, Adam then L-BFGS); a second optimizer that steps
once per clock step, or once per several (a GAN's generator), never does.

A loop that updates its parameters by hand (``p.data.add_(p.grad, alpha=-lr)``, no
``torch.optim``) never steps an optimizer. Until one does, the clock watches for the boundary
such a loop shows: a backward, then an in-place update of the model's parameters (their version
counters moved, or, for an update through ``.data``, which no counter sees, the data of a
parameter that had a grad), then the first piece of the next iteration's work (a ``zero_grad``, a training
forward, a backward), which starts the next step. Gradient accumulation without an optimizer
updates nothing between its backwards, so it keeps one step.
"""

from __future__ import annotations

import weakref

from traincheck_agent.trace.schema import PHASE_EVAL, PHASE_INIT, PHASE_TRAIN


class TrainingClock:
    def __init__(self) -> None:
        self.step = -1
        self.model_training = True
        self._clock_optimizer: int | None = None
        self._clock_ref: weakref.ref | None = None  # to tell a gone clock optimizer from a reused id
        self._stepped_since_clock: set[int] = set()  # other optimizers that stepped since the clock's last
        self._advance_pending = False
        # Loops without an optimizer: what the parameters looked like when the last backward
        # ended (None: no backward waits for its update), and whether steps were counted so.
        self._versions_after_backward: object | None = None
        self.counts_manual_updates = False

    @property
    def started(self) -> bool:
        return self.step >= 0

    def start_training(self) -> None:
        if self.step < 0:
            self.step = 0

    def optimizer_step_finished(self, optimizer: object) -> None:
        key = id(optimizer)
        gone = self._clock_ref is not None and self._clock_ref() is None
        if self._clock_optimizer is None or gone or (key != self._clock_optimizer and key in self._stepped_since_clock):
            self._clock_optimizer = key
            try:
                self._clock_ref = weakref.ref(optimizer)
            except TypeError:  # an object that takes no weak reference: held by id alone
                self._clock_ref = None
            self._versions_after_backward = None
        if key == self._clock_optimizer:
            self._stepped_since_clock.clear()
            self._advance_pending = True
        else:
            self._stepped_since_clock.add(key)

    @property
    def watches_manual_updates(self) -> bool:
        """No optimizer has stepped yet: the boundary may be an update by hand."""
        return self._clock_optimizer is None

    def backward_finished(self, versions: object) -> None:
        """A backward ended (loops without an optimizer): remember what the parameters look like
        (``versions``: anything that changes when they are updated)."""
        if self._clock_optimizer is None:
            self._versions_after_backward = versions

    @property
    def awaits_manual_update(self) -> bool:
        return self._clock_optimizer is None and self._versions_after_backward is not None

    def next_work_begins(self, versions: object) -> bool:
        """The next iteration's work begins; if the parameters were updated in place since the
        last backward, that backward's step is finished (the advance is pending). True then."""
        if not self.awaits_manual_update or versions == self._versions_after_backward:
            return False
        self._versions_after_backward = None
        self._advance_pending = True
        self.counts_manual_updates = True
        return True

    def boundary_note(self) -> str:
        """The step boundary, in words, where it is not the optimizer's step; else ""."""
        if self.counts_manual_updates and self._clock_optimizer is None:
            return "steps counted at parameter updates by hand (no optimizer stepped)"
        return ""

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
