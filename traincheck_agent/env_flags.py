"""Yes/no environment variables (``TRAINCHECK_DEBUG``, ``TRAINCHECK_CHECK_TRACE``,
``TRAINCHECK_NO_DEFAULT_POLICIES``), read one way everywhere.

``1``, ``true``, ``yes`` and ``on`` mean yes; ``0``, ``false``, ``no``, ``off`` and the empty
string mean no (case and surrounding spaces do not matter). Any other value gets one warning
naming the variable and the value, and the variable's default applies: a typo neither turns a
feature on nor silently turns one off.

``TRAINCHECK_MODE`` is not a yes/no variable (its off values also include ``none``): see
``settings.normalise_mode``.
"""

from __future__ import annotations

from collections.abc import Mapping

TRUE_VALUES = ("1", "true", "yes", "on")
FALSE_VALUES = ("0", "false", "no", "off", "")


def parse_flag(raw: str) -> bool | None:
    """True or False for a yes/no value; None for anything else."""
    value = raw.strip().lower()
    if value in TRUE_VALUES:
        return True
    if value in FALSE_VALUES:
        return False
    return None


def env_flag(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    """The yes/no variable ``name`` of ``env``: ``default`` when it is unset, and when its value
    is not a yes/no value (then with one warning per process and value)."""
    raw = env.get(name)
    if raw is None:
        return default
    value = parse_flag(raw)
    if value is not None:
        return value
    # Imported here: messages reads TRAINCHECK_DEBUG through this module.
    from traincheck_agent.messages import warn_once

    known = ", ".join(word for word in TRUE_VALUES + FALSE_VALUES if word)
    warn_once(f"env-flag {name}={raw!r}", f"{name}={raw!r} is not one of {known}; using {int(default)}")
    return default


__all__ = ["FALSE_VALUES", "TRUE_VALUES", "env_flag", "parse_flag"]
