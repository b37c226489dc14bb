"""Startup gate of traincheck-agent: decides, at interpreter start, whether to start the agent.

Installed at the top of site-packages next to two hook files:

* ``traincheck_agent.pth`` (Python <= 3.14): one ``import`` line that site.py exec()s. It reads
  TRAINCHECK_MODE itself and imports this module only when the mode is something other than
  off, so an idle install costs one environment lookup and imports nothing of ours.
* ``traincheck_agent.start`` (PEP 829, Python 3.15+): the entry point
  ``traincheck_agent_startup:run``. Because it has the same stem as the .pth file, 3.15+ skips
  the .pth import line and calls ``run()`` (no arguments) instead; 3.18+ ignores .pth import
  lines altogether, so the .start file is what keeps the hook alive there. On that path this
  module is always imported, which is why it only uses ``os`` and ``sys`` (already loaded by
  site.py) until a mode is switched on.

Nothing here may stop the user's program: ``run()`` prints at most one warning line and returns.
"""

from __future__ import annotations

import os
import sys

# Mirrors traincheck_agent.settings.normalise_mode; inlined so that an unknown value costs no
# import of the package (tests keep the two in step).
_OFF_VALUES = ("", "off", "0", "false", "no", "none")
_ACTIVE_MODES = ("collect", "check")

_ran = False


def _warn(text: str) -> None:
    try:
        sys.stderr.write(f"[traincheck] warning: {text}\n")
        sys.stderr.flush()
    except Exception:  # no usable stderr (pythonw, closed pipe): stay silent
        pass


def _one_line(value: object) -> str:
    try:
        flat = " ".join(str(value).split())
        if not flat.isprintable():  # escape sequences shown, not obeyed (as terminal_text does)
            flat = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in flat)
    except Exception:  # an exception whose __str__ fails still gets its one line
        flat = "<unprintable>"
    return flat if len(flat) <= 300 else flat[:297] + "..."


def _resolve_mode(raw: str | None) -> str | None:
    """Return off, collect or check; None for a value that names no mode."""
    if raw is None:
        return "off"
    value = raw.strip().lower()
    if value in _OFF_VALUES:
        return "off"
    return value if value in _ACTIVE_MODES else None


def run() -> None:
    """Start the agent when TRAINCHECK_MODE asks for it; a second call does nothing.

    site.py may process the same .pth more than once (CPython 3.11 venvs scan their
    site-packages twice; site.addsitedir on a known directory rescans it), so the first call
    wins. Failures become one warning line: the training run matters more than
    the agent. KeyboardInterrupt alone is passed on, since the user asked to stop.
    """
    global _ran
    if _ran:
        return
    _ran = True
    raw = os.environ.get("TRAINCHECK_MODE")
    mode = _resolve_mode(raw)
    if mode == "off":
        return
    if mode is None:
        _warn(
            f"TRAINCHECK_MODE={_one_line(raw)} is not one of off, collect, check; "
            "the agent stays off"
        )
        return
    try:
        from traincheck_agent.agent import bootstrap

        bootstrap.start(mode)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit from a dependency must not end the user's program
        detail = _one_line(exc)
        what = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
        _warn(f"agent not started: {what}")
