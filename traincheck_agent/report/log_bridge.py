"""Violations through Python's ``logging``, to the handlers a training script already has.

Each violation shown on stderr (and each waived one, under the same per-invariant limit)
becomes one record on the ``traincheck`` logger: level WARNING (INFO for one
marked ``waived``), the message the one line a person reads (without the ``[traincheck]``
prefix, which the logger's name replaces), and the JSON record itself as the attribute
``traincheck`` of the ``LogRecord`` (``logging``'s ``extra``), so that a handler can forward
its fields to a log pipeline, W&B or MLflow.

The record is emitted only when some handler would receive it (``Logger.hasHandlers``: one on
``traincheck`` or, while it propagates, on an ancestor such as the root logger). Otherwise
Python's last-resort handler would print the line on stderr next to the one the violations log
prints already. The logger is looked up at the first violation, not at import, so a
``logging.config.dictConfig`` that the script runs at start-up (which disables the loggers that
exist then, unless told otherwise) leaves it working. Nothing is added to the logging
configuration: no handler, no level, no ``propagate`` change.

Handlers are the user's code: whatever one raises is caught here and said once on stderr, and
a violation found while a handler runs (a handler that calls into the watched framework) is not
sent to logging a second time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from traincheck_agent.messages import PREFIX, warn_once
from traincheck_agent.terminal_text import visible

LOGGER_NAME = "traincheck"

_inside = threading.local()


def log_violation(record: dict[str, Any], describe: Callable[[dict[str, Any]], str]) -> None:
    """Send one violation ``record`` (from ``violation_record``) to the ``traincheck`` logger,
    as the line ``describe`` (``format_line``) makes of it; never raises."""
    if getattr(_inside, "active", False):
        return
    _inside.active = True
    try:
        logger = logging.getLogger(LOGGER_NAME)
        level = logging.INFO if record.get("waived") else logging.WARNING
        if logger.isEnabledFor(level) and logger.hasHandlers():
            logger.log(level, _message(record, describe), extra={"traincheck": record})
    except Exception as exc:  # a handler's fault must not reach the training script
        warn_once("log-bridge", f"a handler of the {LOGGER_NAME!r} logger failed on a violation "
                                f"({type(exc).__name__}); the violations log and stderr are unaffected")
    finally:
        _inside.active = False


def _message(record: dict[str, Any], describe: Callable[[dict[str, Any]], str]) -> str:
    try:
        line = describe(record)
    except Exception:  # a malformed record still reaches the handlers, with a plainer line
        return visible(f"violation of {record.get('invariant')}")
    prefix = f"{PREFIX} "
    return line[len(prefix):] if line.startswith(prefix) else line


__all__ = ["LOGGER_NAME", "log_violation"]
