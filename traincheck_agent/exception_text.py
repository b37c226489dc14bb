"""How the agent words an exception in its own messages, without trusting the exception.

An exception the agent contains may come from the user's objects (a ``__len__`` that raised),
and its ``__str__`` is the user's code too: it may raise, return something that is not a string,
or print pages. The agent's error reporting must never fail on it, so the text is the type's
name plus the message, each read under a guard and cut short, with a fixed text where they fail.
"""

from __future__ import annotations

MAX_MESSAGE = 200
UNPRINTABLE = "<message could not be formatted>"

_type_name_of = vars(type)["__name__"].__get__  # the class's own name, past any metaclass


def class_name(cls: type) -> str:
    """``cls.__name__``, read without running a metaclass's code; never raises."""
    try:
        return _type_name_of(cls, type)
    except Exception:
        return "?"


def exception_text(exc: BaseException) -> str:
    """``"<Type>: <message>"`` (``"<Type>"`` for an empty message); never raises."""
    name = class_name(type(exc))
    try:
        message = str(exc)
        if type(message) is not str:
            message = UNPRINTABLE
    except Exception:
        message = UNPRINTABLE
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE] + "..."
    return f"{name}: {message}" if message else name
