"""Violation records: one JSON object per violation, and the log that writes them.

A record carries the fields people and scripts look for at the top level (``timestamp``,
``severity``, ``rank``, ``step``, ``invariant``, ``relation``, ``message``, ``api`` /
``variable``, ``evidence``) and the same facts under OpenTelemetry log data model names
(``time_unix_nano``, ``severity_text``, ``severity_number``, ``body``, ``attributes``,
``resource``), so that log collectors take a ``violations-<rank>.jsonl`` line as it is. The
schema is documented in docs/checking.md.

This module is imported by the training process in check mode: it must stay light (no torch)
and :class:`ViolationLog` never lets an I/O error reach the training script.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from traincheck_agent.messages import PREFIX, warn
from traincheck_agent.output_files import make_output_dir, open_append
from traincheck_agent.report.hints import hint_for_record
from traincheck_agent.report.log_bridge import log_violation
from traincheck_agent.report.sentences import (
    expected_of,
    plain_expected,
    plural,
    record_sentence,
    what_happened,
)
from traincheck_agent.terminal_text import visible, write_line

if TYPE_CHECKING:
    from traincheck_agent.inference.invariant import Invariant

SERVICE_NAME = "traincheck"
VIOLATIONS_GLOB = "violations-*.jsonl"
# OpenTelemetry SeverityNumber of each SeverityText (the first of each range of four).
SEVERITY_NUMBERS = {"TRACE": 1, "DEBUG": 5, "INFO": 9, "WARN": 13, "ERROR": 17, "FATAL": 21}
_SEVERITY_ALIASES = {"WARNING": "WARN", "CRITICAL": "FATAL"}
# Keys of a violation dict that have their own place in the record; the rest is evidence.
_OWN_KEYS = ("invariant", "relation", "step", "message", "api", "variable")


def violations_path(out_dir: str | Path, rank: int) -> Path:
    return Path(out_dir) / f"violations-{rank}.jsonl"


def iso_utc(timestamp_ns: int) -> str:
    """``2026-01-31T12:00:00.123456Z``: RFC 3339, UTC, microseconds (the nanoseconds are in
    ``time_unix_nano``)."""
    seconds, nanos = divmod(timestamp_ns, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos // 1000:06d}Z"


def _severity(severity: str) -> tuple[str, int]:
    text = _SEVERITY_ALIASES.get(severity.upper(), severity.upper())
    if text not in SEVERITY_NUMBERS:
        raise ValueError(f"unknown severity {severity!r} (known: {', '.join(SEVERITY_NUMBERS)})")
    return text, SEVERITY_NUMBERS[text]


def _evidence(violation: dict[str, Any], invariant: Invariant | None) -> dict[str, Any]:
    """What backs the violation: the relation's own details (trace file, ranks, ...) and what
    the invariant said and how strongly the clean runs supported it."""
    evidence = {k: v for k, v in violation.items() if k not in _OWN_KEYS}
    if invariant is not None:
        evidence["expected"] = invariant.description
        evidence["subject"] = dict(invariant.subject)
        evidence["precondition"] = [clause.text() for clause in invariant.precondition]
        evidence["support"] = dict(invariant.support)
    return evidence


def violation_record(violation: dict[str, Any], invariant: Invariant | None, *, rank: int,
                     run_id: str | None, host: str | None = None, timestamp_ns: int | None = None,
                     severity: str = "ERROR", pid: int | None = None,
                     waived: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON-able record of one violation (as returned by ``check_offline`` or the online
    checker) of ``invariant``, seen by process ``rank`` of run ``run_id``. ``host``, ``pid`` and
    ``timestamp_ns`` default to this process and now (an offline check passes the traced
    process's host and pid). ``waived``: the mark of the waiver that covers it
    (``check.waivers.waived_mark``); the record then carries it and is of severity INFO."""
    ns = time.time_ns() if timestamp_ns is None else int(timestamp_ns)
    if waived is not None:
        severity = "INFO"
    severity_text, severity_number = _severity(severity)
    step = violation.get("step")
    message = str(violation.get("message", ""))
    api = violation.get("api") or None
    variable = violation.get("variable") or None
    ranks = violation.get("ranks")
    host_name = host if host is not None else _host_name()
    invariant_id = str(violation.get("invariant") or (invariant.id if invariant else ""))
    relation = str(violation.get("relation") or (invariant.relation if invariant else ""))

    record: dict[str, Any] = {
        "timestamp": iso_utc(ns),
        "time_unix_nano": ns,
        "severity": severity_text,
        "severity_text": severity_text,
        "severity_number": severity_number,
        "rank": rank,
        "step": step,
        "invariant": invariant_id,
        "relation": relation,
        "message": message,
    }
    if api:
        record["api"] = api
    if variable:
        record["variable"] = variable
    if ranks is not None:
        record["ranks"] = list(ranks)
    record["run_id"] = run_id
    if waived is not None:
        record["waived"] = dict(waived)
    record["body"] = message
    record["evidence"] = _evidence(violation, invariant)
    record["sentence"] = record_sentence(record)
    hint = hint_for_record(record)
    if hint is not None:
        record["hint"] = hint.hint

    attributes: dict[str, Any] = {
        "traincheck.invariant": invariant_id,
        "traincheck.relation": relation,
        "traincheck.step": step,
        "traincheck.rank": rank,
    }
    if invariant is not None and invariant.description:
        attributes["traincheck.expected"] = invariant.description
    if api:
        attributes["traincheck.api"] = api
    if variable:
        attributes["traincheck.variable"] = variable
    if ranks is not None:
        attributes["traincheck.ranks"] = list(ranks)
    if run_id is not None:
        attributes["traincheck.run_id"] = run_id
    if waived is not None:
        attributes["traincheck.waived"] = True
        attributes["traincheck.waiver.reason"] = waived.get("reason")
        attributes["traincheck.waiver.index"] = waived.get("waiver")
    resource = {"service.name": SERVICE_NAME, "host.name": host_name,
                "process.pid": os.getpid() if pid is None else pid}
    # Also among the attributes: collectors that keep only attributes still see where it ran.
    attributes.update(resource)
    record["attributes"] = attributes
    record["resource"] = resource
    return record


def _host_name() -> str:
    try:
        return os.uname().nodename
    except (AttributeError, OSError):
        return ""


def format_line(record: dict[str, Any]) -> str:
    """One line for a person, what happened first: where (rank, step), what happened and on which
    API / parameter, what was expected (without its precondition: the record keeps it), and the
    invariant id to look up. Control characters in any of them are shown escaped."""
    parts = [f"{PREFIX} violation at rank {record.get('rank')} step {record.get('step')}: "
             f"{record_sentence(record)}"]
    expected = plain_expected(record)
    if expected:
        parts.append(f"expected {expected}")
    parts.append(f"invariant {record.get('invariant')} ({record.get('relation')})")
    return visible("; ".join(parts))


COVERAGE_EVENT = "coverage"  # the ``event`` of the stats record that closes a check's log
WAIVERS_EVENT = "waivers"  # the ``event`` of the stats record of what each waiver matched
STATS_EVENTS = (COVERAGE_EVENT, WAIVERS_EVENT)


def coverage_record(coverage: dict[str, Any], summary: str, *, rank: int, run_id: str | None,
                    host: str | None = None) -> dict[str, Any]:
    """The stats record of a check (``event: coverage``): per invariant, the examples judged and
    those outside the references' domain (``Coverage.to_json``), with the summary as its body.
    Log pipelines take it as an INFO line; ``traincheck report`` shows it."""
    ns = time.time_ns()
    checked = sum(v for v in coverage.get("checked", {}).values() if isinstance(v, int))
    outside = sum(v for v in coverage.get("outside", {}).values() if isinstance(v, int))
    summary = summary or f"{plural(checked, 'example')} checked, none outside the references' domain"
    resource = {"service.name": SERVICE_NAME, "host.name": host if host is not None else _host_name(),
                "process.pid": os.getpid()}
    return {
        "timestamp": iso_utc(ns), "time_unix_nano": ns, "severity": "INFO", "severity_text": "INFO",
        "severity_number": SEVERITY_NUMBERS["INFO"], "event": COVERAGE_EVENT, "rank": rank, "run_id": run_id,
        "body": summary, "message": summary, "coverage": coverage,
        "attributes": {"traincheck.event": COVERAGE_EVENT, "traincheck.rank": rank,
                       "traincheck.examples_checked": checked, "traincheck.examples_not_covered": outside,
                       **({"traincheck.run_id": run_id} if run_id is not None else {}), **resource},
        "resource": resource,
    }


def waivers_record(tally: dict[str, Any], *, rank: int, run_id: str | None,
                   host: str | None = None) -> dict[str, Any]:
    """The stats record of the waivers of a check (``event: waivers``): per waiver, how many
    violations of this rank it matched (``Waivers.tally``). ``traincheck report`` adds them up
    over the ranks to tell which waivers matched nothing anywhere."""
    ns = time.time_ns()
    entries = tally.get("entries") or []
    waived = sum(e.get("matched", 0) for e in entries if isinstance(e, dict))
    stale = sum(1 for e in entries if isinstance(e, dict) and not e.get("matched"))
    body = f"{waived} violations waived; {stale} of {len(entries)} waivers matched nothing on rank {rank}"
    resource = {"service.name": SERVICE_NAME, "host.name": host if host is not None else _host_name(),
                "process.pid": os.getpid()}
    return {
        "timestamp": iso_utc(ns), "time_unix_nano": ns, "severity": "INFO", "severity_text": "INFO",
        "severity_number": SEVERITY_NUMBERS["INFO"], "event": WAIVERS_EVENT, "rank": rank, "run_id": run_id,
        "body": body, "message": body, "waivers": tally,
        "attributes": {"traincheck.event": WAIVERS_EVENT, "traincheck.rank": rank,
                       "traincheck.violations_waived": waived, "traincheck.waivers_stale": stale,
                       **({"traincheck.run_id": run_id} if run_id is not None else {}), **resource},
        "resource": resource,
    }


class ViolationLog:
    """Appends every violation to ``violations-<rank>.jsonl`` and shows it on ``stream``,
    at most ``stderr_limit`` lines per invariant (the rest are counted, and summarised by
    :meth:`close`; the file always gets every record). A waived violation (a record with
    ``waived``) is written and counted in ``waived``, never shown. What is shown, and waived
    violations under the same per-invariant limit, also goes to the ``traincheck`` logger when it
    has a handler (``log_bridge``): a script that logs to its console is not flooded.

    Each line is flushed as it is written so a killed process loses nothing already reported.
    I/O errors never propagate: the first is reported with one warning, the file is given up,
    and the stream keeps getting the lines.
    """

    def __init__(self, out_dir: Path, rank: int, stream: TextIO | None = None,
                 stderr_limit: int = 3) -> None:
        self.out_dir = Path(out_dir)
        self.rank = rank
        self.path = violations_path(self.out_dir, rank)
        self.stream = stream
        self.stderr_limit = stderr_limit
        self.counts: dict[str, int] = {}
        self.waived: dict[str, int] = {}  # waived violations per invariant
        self._handle: Any = None
        self._file_failed = False
        self._hidden_said: dict[str, int] = {}
        self._lock = threading.Lock()

    def report(self, record: dict[str, Any]) -> None:
        """Write ``record`` (from :func:`violation_record`) and show it unless rate-limited."""
        with self._lock:
            invariant = str(record.get("invariant", ""))
            waived = bool(record.get("waived"))
            tally = self.waived if waived else self.counts
            seen = tally.get(invariant, 0) + 1
            tally[invariant] = seen
            self._write(record)
            shown = seen <= self.stderr_limit
            if shown and not waived:
                try:
                    line = format_line(record)
                except Exception:  # a malformed record must not break training
                    line = f"{PREFIX} violation of {invariant}"
                self._say(line)
        if shown:
            log_violation(record, format_line)  # outside the lock: a handler may take its time

    def stats(self, record: dict[str, Any]) -> None:
        """Write a stats record (``coverage_record``) to the file only."""
        with self._lock:
            self._write(record)

    def close(self) -> dict[str, int]:
        """Say how many violations of each invariant were not shown; return the number of
        violations of each invariant (all of them, shown or not). A report after ``close``
        still reaches the file, and a later ``close`` summarises what it did not show."""
        with self._lock:
            for invariant, seen in sorted(self.counts.items()):
                hidden = max(seen - self.stderr_limit, 0) - self._hidden_said.get(invariant, 0)
                if hidden > 0:
                    self._hidden_said[invariant] = self._hidden_said.get(invariant, 0) + hidden
                    where = "" if self._file_failed else f" (all in {self.path})"
                    self._say(f"{PREFIX} {plural(hidden, 'more violation')} of {invariant} not shown{where}")
            self._close_file()
            return dict(self.counts)

    def _write(self, record: dict[str, Any]) -> None:
        if self._file_failed:
            return
        try:
            line = orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS, default=str) + b"\n"
            if self._handle is None:
                make_output_dir(self.out_dir)
                self._handle = os.fdopen(open_append(self.path), "ab")
            self._handle.write(line)
            self._handle.flush()
        except (OSError, TypeError, ValueError) as exc:
            self._file_failed = True
            self._close_file()
            warn(f"cannot write violations to {self.path} ({exc}); they are shown on stderr only")

    def _close_file(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            with contextlib.suppress(OSError):
                handle.close()

    def _say(self, line: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        try:
            write_line(stream, line)
            stream.flush()
        except Exception:  # closed or broken stream: stay silent rather than fail the run
            pass


__all__ = ["COVERAGE_EVENT", "SERVICE_NAME", "SEVERITY_NUMBERS", "STATS_EVENTS", "VIOLATIONS_GLOB",
           "WAIVERS_EVENT", "ViolationLog", "coverage_record", "expected_of",
           "format_line", "iso_utc", "violation_record", "violations_path", "waivers_record", "what_happened"]
