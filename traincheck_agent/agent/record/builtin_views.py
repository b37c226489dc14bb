"""Builtin containers read through the builtin types' own methods.

A program may pass a subclass of ``list``, ``tuple``, ``dict`` or ``str`` whose ``__len__``,
``__iter__`` or ``__getitem__`` does anything, raising included. ``list.__len__(x)`` and the
like read the object's builtin storage and run none of that code, so the agent's view of a
container is what the builtin type holds, whatever its subclass says. Types are tested with
``issubclass(type(x), ...)``: ``isinstance`` asks a non-matching object for its ``__class__``,
which is the program's code too.
"""

from __future__ import annotations

from typing import Any

from traincheck_agent.exception_text import class_name

_SIMPLE_KEYS = (str, int, float, bool, type(None))


def builtin_len(value: Any) -> int:
    """The length the builtin type stores (``value``: a list, tuple, dict or str, or a subclass)."""
    cls = type(value)
    if issubclass(cls, list):
        return list.__len__(value)
    if issubclass(cls, tuple):
        return tuple.__len__(value)
    if issubclass(cls, dict):
        return dict.__len__(value)
    return str.__len__(value)


def builtin_items(value: Any) -> list | tuple:
    """A plain ``list`` or ``tuple`` holding the same items (``value``: a list or tuple, or a
    subclass)."""
    if issubclass(type(value), list):
        return list.__getitem__(value, slice(None))
    return tuple.__getitem__(value, slice(None))


def key_text(key: Any) -> str:
    """A dict key as text: the key itself for strings and numbers, else its type's name (a
    key of another type could run anything in ``__str__``)."""
    cls = type(key)
    if cls is str:
        return key
    if any(cls is simple for simple in _SIMPLE_KEYS):
        return str(key)
    return f"<{class_name(cls)}>"
