"""The agent's own one-line messages to the user, on stderr.

Every line starts with ``[traincheck]`` so that it can be told apart from the training script's
output, and shows control characters escaped (``terminal_text``): a name with a newline cannot
forge a line of ours. ``warn_once`` keeps a repeated problem to a single line per process.
"""

from __future__ import annotations

import os
import sys

from traincheck_agent.env_flags import env_flag
from traincheck_agent.fork_safety import ForkSafeLock
from traincheck_agent.terminal_text import visible

PREFIX = "[traincheck]"

_seen: set[str] = set()
_seen_lock = ForkSafeLock()


def say(text: str) -> None:
    """Print one line to stderr; never raises."""
    try:
        sys.stderr.write(f"{PREFIX} {visible(text)}\n")
        sys.stderr.flush()
    except Exception:  # stderr closed or broken: the agent stays silent rather than fail
        pass


def warn(text: str) -> None:
    say(f"warning: {text}")


def warn_once(key: str, text: str) -> None:
    """Warn once per process for ``key``; a forked child inherits what its parent already said."""
    with _seen_lock:
        if key in _seen:
            return
        _seen.add(key)
    warn(text)


def debug(text: str) -> None:
    if env_flag(os.environ, "TRAINCHECK_DEBUG"):
        say(f"debug: {text}")
