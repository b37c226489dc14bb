"""Waivers: violations a person judged harmless, silenced one by one with a reason.

A waivers file (YAML, format in docs/waivers.md) lives next to the training script and is
reviewed like code. Each waiver names one invariant by id, or a relation with glob patterns for
the API and / or variable, optionally limited to a range of steps. A waived violation is still
counted and written (marked), but never reported as a failure; a waiver that matches nothing in
a run is reported as stale.

The file is validated in full when it is read: the first problem raises
:class:`WaiverFileError` naming the file, the waiver and the problem. This module is imported by
the training process in check mode: it stays light (no torch; PyYAML only when a file is read).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from traincheck_agent.input_files import read_limited

FILE_VERSION = 1
MAX_FILE_BYTES = 1 << 20  # written by hand: hundreds of bytes per waiver
MAX_PATTERN_CHARS = 1000
DEFAULT_WAIVERS_FILE = Path("traincheck-waivers.yaml")
TOP_LEVEL_KEYS = ("version", "waivers")
WAIVER_KEYS = ("id", "relation", "api", "variable", "steps", "reason")
STEP_RANGE_KEYS = ("from", "to")
# Invariant ids are two characters of the relation and 12 hex digits of the content hash.
_INVARIANT_ID = re.compile(r"[a-z0-9]{2}-[0-9a-f]{12}")
_STEP_RANGE = re.compile(r"\s*(\d+)\s*-\s*(\d+)\s*")


class WaiverFileError(ValueError):
    """A problem in a waivers file; ``str()`` names the file and, when it is about one, the
    waiver (``waivers[2]``) and its key."""

    def __init__(self, path: str | Path, where: str, problem: str) -> None:
        self.path, self.where, self.problem = str(path), where, problem
        super().__init__(f"{path}: {where}: {problem}" if where else f"{path}: {problem}")


@dataclass(frozen=True)
class Waiver:
    """One entry of a waivers file; ``index`` is its position in the file's list."""

    index: int
    reason: str
    invariant: str | None = None
    relation: str | None = None
    api: str | None = None
    variable: str | None = None
    first_step: int | None = None
    last_step: int | None = None

    def matches(self, violation: Mapping[str, Any]) -> bool:
        """Whether this waiver covers ``violation`` (a violation dict or record: its
        ``invariant``, ``relation``, ``api``, ``variable`` and ``step``)."""
        if self.invariant is not None:
            if violation.get("invariant") != self.invariant:
                return False
        else:
            if violation.get("relation") != self.relation:
                return False
            if self.api is not None and not _glob_matches(self.api, violation.get("api")):
                return False
            if self.variable is not None and not _glob_matches(self.variable, violation.get("variable")):
                return False
        if self.first_step is None and self.last_step is None:
            return True
        step = violation.get("step")
        if type(step) is not int:
            return False  # a step range says nothing of a violation without a step
        return (self.first_step is None or step >= self.first_step) and \
            (self.last_step is None or step <= self.last_step)

    def label(self) -> str:
        """What the waiver covers, in a few words (for summaries)."""
        if self.invariant is not None:
            what = f"invariant {self.invariant}"
        else:
            parts = [f"{self.relation}"]
            if self.api is not None:
                parts.append(f"api {self.api}")
            if self.variable is not None:
                parts.append(f"variable {self.variable}")
            what = ", ".join(parts)
        if self.first_step is not None or self.last_step is not None:
            lo = "" if self.first_step is None else str(self.first_step)
            hi = "" if self.last_step is None else str(self.last_step)
            what += f", steps {lo}-{hi}"
        return what


def _glob_matches(pattern: str, value: Any) -> bool:
    return isinstance(value, str) and fnmatchcase(value, pattern)


@dataclass
class Waivers:
    """The waivers of one file, and how many violations each has matched so far."""

    path: Path
    entries: tuple[Waiver, ...] = ()
    matched: dict[int, int] = field(default_factory=dict)

    def match(self, violation: Mapping[str, Any]) -> Waiver | None:
        """The first waiver covering ``violation`` (counted as matched), or None."""
        for waiver in self.entries:
            if waiver.matches(violation):
                self.matched[waiver.index] = self.matched.get(waiver.index, 0) + 1
                return waiver
        return None

    def stale(self) -> list[Waiver]:
        """The waivers that have matched nothing so far."""
        return [w for w in self.entries if not self.matched.get(w.index)]

    def tally(self) -> dict[str, Any]:
        """What ``match`` counted, as JSON (the ``waivers`` stats record of a violations file):
        the file, and per waiver its label, reason and number of matches."""
        return {"file": str(self.path),
                "entries": [{"index": w.index, "label": w.label(), "reason": w.reason,
                             "matched": self.matched.get(w.index, 0)} for w in self.entries]}


def waived_mark(waiver: Waiver, path: Path | str) -> dict[str, Any]:
    """The ``waived`` field of a waived violation's record."""
    return {"reason": waiver.reason, "waiver": waiver.index, "file": str(path)}


def stale_line(waiver: Waiver, path: Path | str, where: str = "in this run") -> str:
    return f"waiver {waiver.index} of {path} ({waiver.label()}) matched nothing {where}; it may be stale"


# ------------------------------------------------------------------------------ reading


def read_waivers(path: str | Path) -> Waivers:
    """Read and validate a waivers file; any problem raises WaiverFileError."""
    path = Path(path)
    return read_waivers_text(_read_text(path), path)


def read_waivers_text(text: str, path: str | Path) -> Waivers:
    """Validate the waivers file text ``text`` of ``path``; any problem raises WaiverFileError."""
    from traincheck_agent.policy.yaml_parse import (
        parse_policy_text,  # PyYAML: only when a file is read
    )

    path = Path(path)
    try:
        document = parse_policy_text(text)
    except ValueError as exc:
        raise WaiverFileError(path, "", str(exc)) from None
    if document is None:
        raise WaiverFileError(path, "", "the file is empty (expected `version: 1` and a `waivers:` list)")
    if not isinstance(document, dict):
        raise WaiverFileError(path, "", f"expected a mapping at the top, got {_kind(document)}")
    for key in document:
        if key not in TOP_LEVEL_KEYS:
            raise WaiverFileError(path, _key_text(key), f"unknown key (known: {', '.join(TOP_LEVEL_KEYS)})")
    version = document.get("version")
    if type(version) is not int or version != FILE_VERSION:
        raise WaiverFileError(path, "version", f"unsupported version {_short(version)} (this reads {FILE_VERSION})")
    raw_entries = document.get("waivers")
    if raw_entries is None:
        raw_entries = []
    if not isinstance(raw_entries, list):
        raise WaiverFileError(path, "waivers", f"expected a list, got {_kind(raw_entries)}")
    return Waivers(path, tuple(_waiver(path, index, raw) for index, raw in enumerate(raw_entries)))


def _read_text(path: Path) -> str:
    try:
        return read_limited(path, MAX_FILE_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WaiverFileError(path, "", f"not UTF-8 text: {exc}") from None
    except ValueError as exc:
        raise WaiverFileError(path, "", str(exc)) from None
    except OSError as exc:
        raise WaiverFileError(path, "", f"cannot be read: {exc.strerror or exc}") from None


def waiver_from_raw(raw: Any, index: int = 0, path: str | Path = "the new waiver") -> Waiver:
    """One waiver validated as the file's entry ``index`` would be (``traincheck invariants
    waive`` checks its arguments with it before touching the file)."""
    return _waiver(Path(path), index, raw)


def _waiver(path: Path, index: int, raw: Any) -> Waiver:
    where = f"waivers[{index}]"
    if not isinstance(raw, dict):
        raise WaiverFileError(path, where, f"expected a mapping, got {_kind(raw)}")
    for key in raw:
        if key not in WAIVER_KEYS:
            raise WaiverFileError(path, f"{where}.{_key_text(key)}", f"unknown key (known: {', '.join(WAIVER_KEYS)})")
    reason = raw.get("reason")
    if reason is None:
        raise WaiverFileError(path, where, "missing reason: say why the violation is harmless")
    if not isinstance(reason, str) or not reason.strip():
        raise WaiverFileError(path, f"{where}.reason", f"expected a non-empty string, got {_short(reason)}")
    first, last = _steps(path, f"{where}.steps", raw.get("steps"))
    patterns = {key: _pattern(path, f"{where}.{key}", raw[key]) for key in ("api", "variable") if key in raw}
    if "id" in raw:
        invariant = raw["id"]
        if not isinstance(invariant, str) or not _INVARIANT_ID.fullmatch(invariant):
            raise WaiverFileError(path, f"{where}.id", f"not an invariant id (such as sc-0123456789ab): {_short(invariant)}")
        if "relation" in raw or patterns:
            raise WaiverFileError(path, where, "give either an id, or a relation with api and/or variable, not both")
        return Waiver(index, reason, invariant=invariant, first_step=first, last_step=last)
    if "relation" not in raw:
        raise WaiverFileError(path, where, "say what is waived: an invariant `id`, or a `relation` with "
                                           "`api` and/or `variable` patterns")
    relation = raw["relation"]
    known = _known_relations()
    if not isinstance(relation, str) or relation not in known:
        raise WaiverFileError(path, f"{where}.relation", f"unknown relation {_short(relation)} (known: {', '.join(known)})")
    if not patterns:
        raise WaiverFileError(path, where, "a relation waiver needs an `api` and/or a `variable` pattern "
                                           "(`*` matches every one)")
    return Waiver(index, reason, relation=relation, api=patterns.get("api"), variable=patterns.get("variable"),
                  first_step=first, last_step=last)


def _known_relations() -> list[str]:
    from traincheck_agent.inference.relations import MODULES

    return list(MODULES)


def _pattern(path: Path, where: str, value: Any) -> str:
    """A glob (``fnmatch``, case-sensitive): a non-empty string without control characters whose
    ``[`` sets are closed (an unclosed one would silently match a literal ``[``)."""
    if not isinstance(value, str) or not value:
        raise WaiverFileError(path, where, f"expected a non-empty glob pattern, got {_short(value)}")
    if len(value) > MAX_PATTERN_CHARS:
        raise WaiverFileError(path, where, f"pattern longer than {MAX_PATTERN_CHARS} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise WaiverFileError(path, where, "pattern holds control characters")
    if _unclosed_set(value):
        raise WaiverFileError(path, where, f"unclosed [ in pattern {_short(value)}")
    return value


def _unclosed_set(pattern: str) -> bool:
    """Whether ``pattern`` opens a ``[...]`` set that it never closes (as fnmatch reads sets:
    a ``]`` right after ``[`` or ``[!`` belongs to the set)."""
    i = 0
    while i < len(pattern):
        if pattern[i] == "[":
            j = i + 1
            if j < len(pattern) and pattern[j] == "!":
                j += 1
            if j < len(pattern) and pattern[j] == "]":
                j += 1
            close = pattern.find("]", j)
            if close < 0:
                return True
            i = close
        i += 1
    return False


def _steps(path: Path, where: str, value: Any) -> tuple[int | None, int | None]:
    """``steps``: absent, one step (``150``), a range (``"100-200"``), or a mapping with
    ``from`` and / or ``to`` (open at the missing end); bounds are included."""
    if value is None:
        return None, None
    if type(value) is int:
        if value < 0:
            raise WaiverFileError(path, where, f"a step is 0 or more, got {value}")
        return value, value
    if isinstance(value, str):
        match = _STEP_RANGE.fullmatch(value)
        if match is None:
            raise WaiverFileError(path, where, f"expected a range such as 100-200, got {_short(value)}")
        first, last = int(match.group(1)), int(match.group(2))
    elif isinstance(value, dict):
        for key in value:
            if key not in STEP_RANGE_KEYS:
                raise WaiverFileError(path, f"{where}.{_key_text(key)}", "unknown key (known: from, to)")
        bounds = []
        for key in STEP_RANGE_KEYS:
            bound = value.get(key)
            if bound is not None and (type(bound) is not int or bound < 0):
                raise WaiverFileError(path, f"{where}.{key}", f"expected a step (0 or more), got {_short(bound)}")
            bounds.append(bound)
        lo, hi = bounds
        if lo is None and hi is None:
            raise WaiverFileError(path, where, "give `from` and / or `to`")
        if lo is None or hi is None:
            return lo, hi
        first, last = lo, hi
    else:
        raise WaiverFileError(path, where, f"expected a step, a range such as 100-200, or from/to, got {_short(value)}")
    if last < first:
        raise WaiverFileError(path, where, f"the range ends before it starts ({first}-{last})")
    return first, last


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def _short(value: Any) -> str:
    """A bounded repr for messages (the caller's line shows control characters escaped)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _key_text(key: Any) -> str:
    return str(key)[:80]


def merge_tallies(tallies: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per waivers file and waiver, the matches of every tally (ranks, runs) added up: entries
    of ``Waivers.tally`` with ``matched`` summed. A waiver matched on any rank is not stale."""
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    for tally in tallies:
        source = str(tally.get("file", ""))
        entries = tally.get("entries")
        if not isinstance(entries, list):
            continue
        for entry in entries:
            if not isinstance(entry, dict) or type(entry.get("index")) is not int:
                continue
            key = (source, entry["index"])
            matched = entry.get("matched") if type(entry.get("matched")) is int else 0
            if key in merged:
                merged[key]["matched"] += matched
            else:
                merged[key] = {"file": source, "index": entry["index"], "label": str(entry.get("label", "")),
                               "reason": str(entry.get("reason", "")), "matched": matched}
    return [merged[key] for key in sorted(merged)]


__all__ = ["DEFAULT_WAIVERS_FILE", "FILE_VERSION", "Waiver", "WaiverFileError", "Waivers", "merge_tallies",
           "read_waivers", "read_waivers_text", "stale_line", "waived_mark", "waiver_from_raw"]
