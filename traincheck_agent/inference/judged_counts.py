"""How many variables an invariant judged at the steps where it broke.

A report that says "backward found stale grads on 10 parameters" leaves the reader asking "of
how many?". The answer is the number of examples the invariant judged at that step, in that
trace, inside its domain and with its precondition holding: counted here per (invariant, trace,
step), for examples that name a variable (a parameter, a module).

Counts are kept only where they are needed. A count whose (invariant, trace) has moved
``SETTLED_AFTER`` steps past it is complete; complete counts of steps without a violation are
dropped when the table grows past ``MAX_KEYS``, and no count is started again below that point
(a late example would make it too small). When even the counts of broken steps fill the table,
no new count is started: a step without a count says "N parameters", never a wrong "N of M".
"""

from __future__ import annotations

from typing import Any

MAX_KEYS = 20_000
SETTLED_AFTER = 2  # steps: examples of a step may complete one step late (cross-rank, GradApplied)

Key = tuple[str, str, int]  # invariant id, trace, step


def example_key(inv_id: str, example: Any) -> Key | None:
    """The count an example belongs to; None for one without a variable or a step."""
    step = getattr(example, "step", None)
    if getattr(example, "var", None) is None or not isinstance(step, int) or isinstance(step, bool):
        return None
    return inv_id, str(getattr(example, "trace", "")), step


class JudgedCounts:
    def __init__(self) -> None:
        self.counts: dict[Key, int] = {}
        self.broken: set[Key] = set()
        self._newest: dict[tuple[str, str], int] = {}  # per (invariant, trace): the newest step
        self._floor: dict[tuple[str, str], int] = {}  # per (invariant, trace): no new count below
        self._full = False

    def judged(self, key: Key, n: int = 1) -> None:
        """Count ``n`` examples judged under ``key``."""
        counts = self.counts
        if key in counts:
            counts[key] += n
            return
        inv_id, trace, step = key
        where = (inv_id, trace)
        if step < self._floor.get(where, step) or self._full:
            return
        if step > self._newest.get(where, step - 1):
            self._newest[where] = step
        if len(counts) >= MAX_KEYS and not self._prune():
            return
        counts[key] = n

    def violated(self, key: Key) -> None:
        if key in self.counts:
            self.broken.add(key)

    def _prune(self) -> bool:
        """Drop settled counts of steps that did not break; False (and no new counts from now
        on) when that frees too little."""
        settled = {where: newest - SETTLED_AFTER for where, newest in self._newest.items()}
        for where, floor in settled.items():
            self._floor[where] = max(self._floor.get(where, floor), floor)
        self.counts = {key: n for key, n in self.counts.items()
                       if key in self.broken or key[2] >= settled.get(key[:2], key[2])}
        if len(self.counts) > MAX_KEYS // 2:
            self._full = True
        return not self._full

    def to_json(self) -> dict[str, dict[str, dict[str, int]]]:
        """The counts of broken steps: ``{invariant: {trace: {step: count}}}``."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for key in sorted(self.broken):
            inv_id, trace, step = key
            out.setdefault(inv_id, {}).setdefault(trace, {})[str(step)] = self.counts[key]
        return out

    def merge(self, other: Any) -> None:
        """Add counts in the form ``to_json`` gives (from a checker in another process)."""
        if not isinstance(other, dict):
            return
        for inv_id, traces in other.items():
            for trace, steps in (traces.items() if isinstance(traces, dict) else ()):
                for step, count in (steps.items() if isinstance(steps, dict) else ()):
                    if isinstance(count, int) and not isinstance(count, bool) and str(step).lstrip("-").isdigit():
                        key = (str(inv_id), str(trace), int(step))
                        self.counts[key] = self.counts.get(key, 0) + count
                        self.broken.add(key)


__all__ = ["MAX_KEYS", "JudgedCounts", "example_key"]
