"""Text on its way to a terminal, with control characters shown instead of obeyed.

Much of what the agent and the CLI print comes from the user's program or from files: parameter
and module names, invariant descriptions, run ids, paths. Such text may hold escape sequences,
which a terminal obeys (colours, window titles, cursor moves, clearing the screen), or a newline,
which starts a line that looks like one of ours (``[traincheck] ...``). Every line meant for a
person passes through :func:`visible` before it is written, so these show up as ``\\x1b``,
``\\n``, ... . Files meant for programs (violations and trace JSONL, ``--json`` output) keep the
exact text.
"""

from __future__ import annotations

from typing import TextIO

_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(text: str) -> str:
    """``text`` with every character that Python does not count as printable (control and
    format characters, line separators, lone surrogates, unassigned code points) written as its
    escape, as ``repr`` shows it; everything else, backslashes included, is left as it is, so
    applying it twice changes nothing more."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def write_line(stream: TextIO, text: str) -> None:
    """Write ``text`` to ``stream`` as one visible line."""
    stream.write(visible(text) + "\n")


__all__ = ["visible", "write_line"]
