"""The exception check mode raises into a training script, and the one line that describes a
violation. Small and free of the agent's machinery, so that a script may import it to catch it:
``from traincheck_agent.errors import TrainCheckViolation``."""

from __future__ import annotations

from typing import Any

from traincheck_agent.terminal_text import visible


class TrainCheckViolation(RuntimeError):
    """Raised into the training script (``TRAINCHECK_ACTION=raise``) when an invariant is
    violated: at the next wrapped API call after the checker found it."""

    def __init__(self, violation: dict[str, Any]) -> None:
        self.violation = dict(violation)
        self.invariant = str(violation.get("invariant", "?"))
        self.step = violation.get("step")
        super().__init__(describe_violation(violation))


def describe_violation(violation: dict[str, Any]) -> str:
    """``invariant <id> (<relation>) violated at step <n>: <what happened> [api ..., variable ...]``,
    one line with control characters shown escaped (it ends up on a terminal, in a traceback)."""
    text = str(violation.get("message", ""))
    where = [f"{k} {violation[k]}" for k in ("api", "variable") if violation.get(k) and str(violation[k]) not in text]
    suffix = f" [{', '.join(where)}]" if where else ""
    return visible(f"invariant {violation.get('invariant', '?')} ({violation.get('relation', '?')}) violated at "
                   f"step {violation.get('step')}: {text}{suffix}")
