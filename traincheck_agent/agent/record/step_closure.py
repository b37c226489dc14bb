"""Optimizer steps that run a closure: ``optimizer.step(closure)`` (PyTorch Lightning, L-BFGS).

Such a step contains a whole training iteration: the closure clears the grads, runs the forward
and the backward and returns the loss, and the optimizer then applies the grads it left (L-BFGS
evaluates it again between its updates). At the step's entry the grads are those of the
previous iteration, or none; the state the step applies is the state when the closure's first
evaluation returns. So for such a step the ``before`` snapshot is taken there: the closure is
replaced, for this one call, by a function that calls it unchanged (same arguments, same result,
same exception) and then takes the snapshot. Both snapshots of the step carry ``closure_calls``,
the number of evaluations so far: the grads after a step that evaluated its closure twice or
more are the last evaluation's, not what the step left.

Limits: a step that never calls its closure gets no ``before`` snapshot (nothing to compare its
``after`` one with); a closure called after its step returned is not watched any more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from traincheck_agent.agent import runtime
from traincheck_agent.trace.schema import CLOSURE_CALLS


def closure_argument(args: tuple, kwargs: dict[str, Any]) -> Callable[..., Any] | None:
    """The closure given to an optimizer's ``step(closure=None)``, or None."""
    candidate = kwargs.get("closure") if "closure" in kwargs else args[0] if args else None
    return candidate if candidate is not None and callable(candidate) else None


class ClosureWatch:
    """One step call with a closure: takes its ``before`` snapshot when the closure first returns."""

    __slots__ = ("call_id", "scope", "calls", "open")

    def __init__(self, call_id: int, scope: dict[str, Any]) -> None:
        self.call_id = call_id
        self.scope = scope  # the snapshot's ``optimizer=`` / ``module=``
        self.calls = 0
        self.open = True

    def arguments(self, args: tuple, kwargs: dict[str, Any], closure: Callable[..., Any]) -> tuple[tuple, dict]:
        """The step's arguments with ``closure`` replaced by the watching function."""
        watched = self._watching(closure)
        if "closure" in kwargs:
            return args, {**kwargs, "closure": watched}
        return (watched, *args[1:]), kwargs

    def _watching(self, closure: Callable[..., Any]) -> Callable[..., Any]:
        def closure_watched(*args: Any, **kwargs: Any) -> Any:
            result = closure(*args, **kwargs)  # the user's closure, outside any guard of ours
            self._returned()
            return result

        return closure_watched

    def _returned(self) -> None:
        state = runtime.thread_state
        rt = runtime.current
        if rt is None or state.busy or not self.open:
            return
        state.busy = True
        try:
            self.calls += 1
            if self.calls == 1:
                rt.probe.snapshot("before", "optimizer.step", self.call_id, extra={CLOSURE_CALLS: 1}, **self.scope)
        except Exception as exc:  # agent fault: the closure's result still goes back
            rt.agent_error("snapshot", exc)
        finally:
            state.busy = False

    def close(self) -> dict[str, Any]:
        """At the step's end: what its ``after`` snapshot carries."""
        self.open = False
        return {CLOSURE_CALLS: self.calls}
