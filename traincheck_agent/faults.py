"""The agent's stages, and deliberate faults in them for testing that the agent's own errors
never reach the training.

Every error the agent contains is reported under the stage it happened in (``wrap``,
``describe``, ...): the user gets one warning per stage, worded with the stage's label, and the
errors count against the agent's error budget.

``TRAINCHECK_INJECT_FAULT`` (for tests of the agent, never for training runs) names stages,
``,``-separated, each optionally with ``:N`` to fail only its first N entries, e.g.
``fingerprint`` or ``snapshot:3``. Each stage calls ``fire(stage)`` where its work starts; with
the variable unset ``armed`` is empty, and the call sites test only that. The variable is read at
import, so it also reaches the checker process, which imports this module afresh.
"""

from __future__ import annotations

import contextlib
import os

from traincheck_agent.fork_safety import ForkSafeLock

ENV = "TRAINCHECK_INJECT_FAULT"

STAGES: dict[str, str] = {
    "wrap": "wrapping an API",
    "record": "recording a call",
    "describe": "describing call arguments",
    "fingerprint": "fingerprinting tensors",
    "snapshot": "taking a state snapshot",
    "writer": "writing the trace",
    "checker": "checking invariants",
    "violation-log": "writing the violation log",
    "exchange": "the cross-rank exchange",
}

_STAGE_ATTR = "_traincheck_stage"
ALWAYS = -1

# stage -> entries left to fail (ALWAYS: every one). Empty unless the variable is set.
armed: dict[str, int] = {}
problems: list[str] = []  # what was wrong with the variable's value, said once by the bootstrap
_lock = ForkSafeLock()


class InjectedFault(RuntimeError):
    """The error a deliberately failing stage raises."""


def parse(spec: str) -> tuple[dict[str, int], list[str]]:
    """``"fingerprint,snapshot:3"`` -> ({"fingerprint": ALWAYS, "snapshot": 3}, problems)."""
    stages: dict[str, int] = {}
    found: list[str] = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        name, _, count = item.partition(":")
        name = name.strip()
        if name not in STAGES:
            found.append(f"{ENV}: unknown stage {name!r} (known: {', '.join(STAGES)}); ignored")
            continue
        if not count:
            stages[name] = ALWAYS
        elif count.strip().isdigit() and int(count) > 0:
            stages[name] = int(count)
        else:
            found.append(f"{ENV}: {item!r} needs a positive count after ':'; ignored")
    return stages, found


def arm(spec: str | None) -> None:
    """Replace the armed faults with those of ``spec`` (None or empty: none)."""
    stages, found = parse(spec or "")
    with _lock:
        armed.clear()
        armed.update(stages)
    problems[:] = found


def fire(stage: str) -> None:
    """Raise :class:`InjectedFault` if ``stage`` is armed (and still has entries to fail)."""
    with _lock:
        left = armed.get(stage)
        if left is None:
            return
        if left != ALWAYS:
            if left <= 1:
                del armed[stage]
            else:
                armed[stage] = left - 1
    raise tag(InjectedFault(f"fault injected into {STAGES[stage]} by {ENV}"), stage)


def tag(exc: BaseException, stage: str) -> BaseException:
    """Mark ``exc`` as raised in ``stage`` unless an inner stage already did; returns it."""
    if getattr(exc, _STAGE_ATTR, None) is None:
        # An exception type without a __dict__ stays untagged: the catching site names it.
        with contextlib.suppress(Exception):
            setattr(exc, _STAGE_ATTR, stage)
    return exc


def stage_of(exc: BaseException, default: str) -> str:
    """The innermost stage ``exc`` was raised in, else the catching site's ``default``. The
    exception may be the program's, whose attribute lookup is its own code: it is guarded."""
    try:
        stage = getattr(exc, _STAGE_ATTR, None)
    except Exception:
        return default
    return stage if type(stage) is str and stage else default


def label(stage: str) -> str:
    return STAGES.get(stage, stage)


arm(os.environ.get(ENV))
