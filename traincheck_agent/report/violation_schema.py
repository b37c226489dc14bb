"""What a violation record must look like to be read back (``traincheck report``).

Check mode and ``traincheck check`` write these records; a file edited by hand, produced by
another tool or damaged can hold anything. A record whose fields have other types than ours
(``"ranks": 5``, ``"variable": ["x"]``, ``"message": {...}``) or that nests deeper than a
record ever does would fail later, far from the file, so it is refused here with a reason.
Fields that are absent are fine: readers fall back on what the record has.
"""

from __future__ import annotations

from typing import Any

from traincheck_agent.report.violations import COVERAGE_EVENT, WAIVERS_EVENT

MAX_DEPTH = 32  # records nest 5 levels at most; Python's JSON writer recurses per level

_TEXT_FIELDS = ("invariant", "relation", "message", "body", "api", "variable", "run_id", "trace",
                "timestamp", "severity", "severity_text", "event", "sentence", "hint")
_INTEGER_FIELDS = ("rank", "step", "time_unix_nano", "severity_number")
_OBJECT_FIELDS = ("evidence", "attributes", "resource")


def _is_int(value: Any) -> bool:
    return type(value) is int


def _too_deep(value: Any) -> bool:
    """Whether ``value`` nests more than ``MAX_DEPTH`` levels (walked without recursion)."""
    pending = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, (dict, list)):
            if depth >= MAX_DEPTH:
                return True
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
    return False


def _coverage_problem(coverage: Any) -> str:
    if not isinstance(coverage, dict):
        return "`coverage` is not an object"
    for key, value_type in (("checked", "integer"), ("outside", "integer"), ("reasons", "string")):
        counts = coverage.get(key)
        if counts is None:
            continue
        if not isinstance(counts, dict):
            return f"`coverage.{key}` is not an object"
        good = _is_int if value_type == "integer" else (lambda v: isinstance(v, str))
        if not all(good(v) for v in counts.values()):
            return f"`coverage.{key}` holds a value that is not a {value_type}"
    judged = coverage.get("judged")  # {invariant: {trace: {step: count}}}
    if judged is not None:
        if not isinstance(judged, dict) or not all(isinstance(traces, dict) for traces in judged.values()):
            return "`coverage.judged` is not an object of objects"
        for traces in judged.values():
            for steps in traces.values():
                if not isinstance(steps, dict) or not all(_is_int(n) for n in steps.values()):
                    return "`coverage.judged` holds a value that is not an object of integers"
    return ""


def _waived_problem(waived: Any) -> str:
    if not isinstance(waived, dict):
        return "`waived` is not an object"
    if not isinstance(waived.get("reason"), str):
        return "`waived.reason` is not a string"
    if not _is_int(waived.get("waiver")):
        return "`waived.waiver` is not an integer"
    return ""


def _waivers_problem(tally: Any) -> str:
    if not isinstance(tally, dict):
        return "`waivers` is not an object"
    entries = tally.get("entries")
    if not isinstance(entries, list):
        return "`waivers.entries` is not a list"
    for entry in entries:
        if not (isinstance(entry, dict) and _is_int(entry.get("index")) and _is_int(entry.get("matched"))):
            return "`waivers.entries` holds an entry without an integer index and matched"
    return ""


def record_problem(record: Any) -> str:
    """Why ``record`` is not a violation record we can read, or "" when it is."""
    if not isinstance(record, dict):
        return "not a JSON object"
    if _too_deep(record):
        return f"nested more than {MAX_DEPTH} levels"
    for key in _TEXT_FIELDS:
        if record.get(key) is not None and not isinstance(record[key], str):
            return f"`{key}` is not a string"
    for key in _INTEGER_FIELDS:
        if record.get(key) is not None and not _is_int(record[key]):
            return f"`{key}` is not an integer"
    for key in _OBJECT_FIELDS:
        if record.get(key) is not None and not isinstance(record[key], dict):
            return f"`{key}` is not an object"
    ranks = record.get("ranks")
    if ranks is not None and not (isinstance(ranks, list) and all(_is_int(r) for r in ranks)):
        return "`ranks` is not a list of integers"
    if record.get("waived") is not None:
        problem = _waived_problem(record["waived"])
        if problem:
            return problem
    if record.get("event") == COVERAGE_EVENT:
        return _coverage_problem(record.get("coverage"))
    if record.get("event") == WAIVERS_EVENT:
        return _waivers_problem(record.get("waivers"))
    return ""
