"""Reading trace files: streaming, strict in the middle, tolerant at the end.

A process killed mid-write (SIGKILL, OOM killer, node failure) can leave a torn last line, so an
unparsable *last* line is skipped with a warning. An unparsable line anywhere else means the file
is damaged in a way the writer never produces, and is reported with its file and line number.

A ``snapshot`` record (schema 2) is expanded into the per-variable ``state`` records it stands
for (``trace.snapshot``), so every consumer reads one form whichever agent wrote the trace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import orjson

from traincheck_agent.messages import warn
from traincheck_agent.trace.schema import (
    KIND_CALL,
    KIND_HEADER,
    KIND_SNAPSHOT,
    KIND_STATE,
    SCHEMA_VERSION,
    TRACE_GLOB,
)
from traincheck_agent.trace.snapshot import SnapshotFormatError, blocks_of, expand


class _ReadingSession:
    """State shared by the reads of one job over several files (inference reads each file once,
    feeding every relation): bytes read go to ``progress``, and a torn last line is reported
    once."""

    def __init__(self, progress: Callable[[int], None] | None) -> None:
        self.progress = progress
        self.torn_reported: set[Path] = set()


_session: _ReadingSession | None = None
_REPORT_BYTES = 1 << 20  # progress is reported in chunks of about this many bytes


@contextmanager
def reading_session(progress: Callable[[int], None] | None = None) -> Iterator[None]:
    """While the block runs, report bytes read to ``progress`` and warn about a file's torn
    last line only the first time it is read."""
    global _session
    previous, _session = _session, _ReadingSession(progress)
    try:
        yield
    finally:
        _session = previous


# Called with (bytes read so far, bytes to read in all).
Progress = Callable[[int, int], None]


@contextmanager
def reading_with_progress(files: list[Path], progress: Progress | None) -> Iterator[None]:
    """A reading session over ``files`` that reports its progress as (bytes read so far, bytes
    to read in all)."""
    total = sum(p.stat().st_size for p in files)
    done = 0

    def read(nbytes: int) -> None:
        nonlocal done
        done += nbytes
        if progress is not None:
            progress(done, total)

    with reading_session(read):
        yield
    if progress is not None:
        progress(total, total)


def _first_torn_report(path: Path) -> bool:
    if _session is None:
        return True
    if path in _session.torn_reported:
        return False
    _session.torn_reported.add(path)
    return True


def _lines_reporting(lines: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, bytes]]:
    report = _session.progress if _session is not None else None
    if report is None:
        yield from lines
        return
    unreported = 0
    for item in lines:
        unreported += len(item[1]) + 1
        if unreported >= _REPORT_BYTES:
            report(unreported)
            unreported = 0
        yield item
    if unreported:
        report(unreported)


class TraceFormatError(ValueError):
    """A trace file that cannot be read; ``str()`` gives ``<file>:<line>: <problem>``."""

    def __init__(self, path: str | Path, line_no: int, problem: str) -> None:
        self.path = Path(path)
        self.line_no = line_no
        self.problem = problem
        super().__init__(f"{path}:{line_no}: {problem}")


class EmptyTraceError(TraceFormatError):
    """A trace file without one complete line: its process died before its first write ended."""


def find_trace_files(paths: Iterable[str | Path]) -> list[Path]:
    """Trace files named by ``paths``: files as given, directories searched recursively.

    Raises FileNotFoundError for a path that does not exist.
    """
    found: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.update(p for p in path.rglob(TRACE_GLOB) if p.is_file())
        elif path.is_file():
            found.add(path)
        elif path.exists():
            raise FileNotFoundError(f"{path}: not a regular file or directory")
        else:
            raise FileNotFoundError(f"{path}: no such file or directory")
    return sorted(found)


# The types of the fields readers rely on, by record kind. A record that breaks them was not
# written by the agent; it is reported like a damaged line rather than failing later without
# naming the file. Missing fields are left to the readers (each skips what it cannot use).
_FIELD_TYPES: dict[str, tuple[tuple[str, type], ...]] = {
    KIND_CALL: (("api", str), ("step", int), ("phase", str), ("args", dict)),
    KIND_STATE: (("var", str), ("step", int), ("where", str), ("phase", str), ("attrs", dict)),
    KIND_SNAPSHOT: (("step", int), ("where", str), ("phase", str), ("blocks", list)),
}


def _schema_problem(record: dict[str, Any]) -> str:
    kind = record.get("kind")
    if not isinstance(kind, str):
        return f"a record without a kind (kind={str(kind)[:40]!r})"
    for name, kind_of in _FIELD_TYPES.get(kind, ()):
        value = record.get(name)
        if value is not None and (not isinstance(value, kind_of) or isinstance(value, bool)):
            return f"a {kind} record whose {name!r} is {type(value).__name__}, not {kind_of.__name__}"
    return ""


def _parse(line: bytes) -> tuple[dict[str, Any] | None, str]:
    """Return (record, "") or (None, problem)."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc})"
    if not isinstance(value, dict):
        return None, f"not a JSON object (got {type(value).__name__})"
    return value, ""


def _lines(handle: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """Numbered non-blank lines, 1-based."""
    for line_no, line in enumerate(handle, start=1):
        if line.strip():
            yield line_no, line


class TraceFile:
    """One trace file: its header and a streaming iterator over its other records."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._header: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"TraceFile({str(self.path)!r})"

    @property
    def header(self) -> dict[str, Any]:
        """The first line, checked to be a header this reader understands."""
        return self._load_header()

    def _load_header(self) -> dict[str, Any]:
        if self._header is None:
            with self.path.open("rb") as handle:
                first = next(_lines(handle), None)
                at_end = first is not None and next(_lines(handle), None) is None
            self._header = self._check_header(first, at_end)
        return self._header

    def _check_header(self, first: tuple[int, bytes] | None, at_end: bool) -> dict[str, Any]:
        if first is None:
            raise EmptyTraceError(self.path, 1, "empty file: no header line")
        line_no, line = first
        record, problem = _parse(line)
        if record is None:
            if at_end and not line.endswith(b"\n"):
                raise EmptyTraceError(self.path, line_no, "torn header line: no complete record")
            raise TraceFormatError(self.path, line_no, f"header line is {problem}")
        if record.get("kind") != KIND_HEADER:
            raise TraceFormatError(
                self.path, line_no, f"first record is not a header (kind={record.get('kind')!r})"
            )
        schema = record.get("schema")
        if not isinstance(schema, int) or isinstance(schema, bool):
            raise TraceFormatError(self.path, line_no, f"header has no valid schema ({schema!r})")
        if schema > SCHEMA_VERSION:
            raise TraceFormatError(
                self.path,
                line_no,
                f"schema {schema} is newer than this reader supports ({SCHEMA_VERSION}); "
                "upgrade traincheck-agent",
            )
        return record

    def records(self, expand_snapshots: bool = True) -> Iterator[dict[str, Any]]:
        """Yield every record after the header, one at a time; see the module docstring. With
        ``expand_snapshots`` False a snapshot record comes as it is (checked)."""
        self._load_header()  # raises before any record is yielded if the file is not a trace
        with self.path.open("rb") as handle:
            lines = _lines_reporting(_lines(handle))
            next(lines, None)  # the header, already checked
            pending: tuple[int, bytes] | None = None
            for item in lines:
                if pending is not None:
                    yield from self._strict(*pending, expand_snapshots)
                pending = item
            if pending is None:
                return
            line_no, line = pending
            record, problem = _parse(line)
            if record is None:
                if _first_torn_report(self.path):
                    warn(f"{self.path}:{line_no}: skipped a torn last line ({problem})")
                return
            yield from self._checked(line_no, record, expand_snapshots)

    def _strict(self, line_no: int, line: bytes, expand_snapshots: bool) -> Sequence[dict[str, Any]]:
        record, problem = _parse(line)
        if record is None:
            raise TraceFormatError(self.path, line_no, f"line is {problem}")
        return self._checked(line_no, record, expand_snapshots)

    def _checked(self, line_no: int, record: dict[str, Any], expand_snapshots: bool) -> Sequence[dict[str, Any]]:
        """The records a line stands for: itself, or a snapshot's state records."""
        problem = _schema_problem(record)
        if problem:
            raise TraceFormatError(self.path, line_no, f"line is {problem}")
        if record.get("kind") != KIND_SNAPSHOT:
            return (record,)
        try:
            if not expand_snapshots:
                blocks_of(record)
                return (record,)
            return list(expand(record))
        except SnapshotFormatError as exc:
            raise TraceFormatError(self.path, line_no, f"line is {exc}") from None


__all__ = ["EmptyTraceError", "TraceFile", "TraceFormatError", "find_trace_files"]
