"""The trace reader: finding files, checking headers, strict middle lines, tolerant last line."""

from __future__ import annotations

import types
from pathlib import Path

import orjson
import pytest

from traincheck_agent.trace.reader import (
    EmptyTraceError,
    TraceFile,
    TraceFormatError,
    find_trace_files,
)
from traincheck_agent.trace.schema import SCHEMA_VERSION

HEADER = {"kind": "header", "schema": SCHEMA_VERSION, "run_id": "r", "rank": 0, "pid": 1}


def _write(path: Path, records: list[dict], tail: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records) + tail)
    return path


def _calls(n: int) -> list[dict]:
    return [{"kind": "call", "api": "torch.add", "id": i} for i in range(n)]


def test_find_trace_files_recurses_sorts_and_keeps_explicit_files(tmp_path: Path) -> None:
    b = _write(tmp_path / "d" / "sub" / "trace_r_rank1_pid2.jsonl", [HEADER])
    a = _write(tmp_path / "d" / "trace_r_rank0_pid1.jsonl", [HEADER])
    _write(tmp_path / "d" / "notes.jsonl", [HEADER])  # not a trace name: ignored in directories
    explicit = _write(tmp_path / "other.jsonl", [HEADER])
    found = find_trace_files([tmp_path / "d", str(explicit), a])
    assert found == sorted([a, b, explicit])


def test_find_trace_files_missing_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope"):
        find_trace_files([tmp_path / "nope"])


def test_header_and_records(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [HEADER, *_calls(5)])
    trace = TraceFile(path)
    assert trace.header == HEADER
    records = trace.records()
    assert isinstance(records, types.GeneratorType)  # streamed, not loaded
    assert list(records) == _calls(5)


def test_blank_lines_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(orjson.dumps(HEADER) + b"\n\n" + orjson.dumps(_calls(1)[0]) + b"\n\n")
    assert list(TraceFile(path).records()) == _calls(1)


def test_first_line_must_be_a_header(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", _calls(2))
    with pytest.raises(TraceFormatError) as info:
        _ = TraceFile(path).header
    assert str(info.value).startswith(f"{path}:1: first record is not a header")
    with pytest.raises(TraceFormatError):
        list(TraceFile(path).records())


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [{**HEADER, "schema": SCHEMA_VERSION + 1}])
    with pytest.raises(TraceFormatError, match="newer than this reader supports") as info:
        _ = TraceFile(path).header
    assert (info.value.path, info.value.line_no) == (path, 1)


def test_header_without_schema_is_refused(tmp_path: Path) -> None:
    header = {k: v for k, v in HEADER.items() if k != "schema"}
    path = _write(tmp_path / "t.jsonl", [header])
    with pytest.raises(TraceFormatError, match="schema"):
        _ = TraceFile(path).header


def test_unparsable_middle_line_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [HEADER, *_calls(2)], tail=b"{oops\n")
    path.write_bytes(path.read_bytes() + orjson.dumps(_calls(1)[0]) + b"\n")
    records = TraceFile(path).records()
    assert next(records) == _calls(2)[0]
    assert next(records) == _calls(2)[1]
    with pytest.raises(TraceFormatError) as info:
        next(records)
    assert info.value.line_no == 4
    assert str(info.value).startswith(f"{path}:4: line is not valid JSON")


def test_non_object_middle_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [HEADER], tail=b"[1, 2]\n" + orjson.dumps(HEADER) + b"\n")
    with pytest.raises(TraceFormatError, match=r":2: line is not a JSON object"):
        list(TraceFile(path).records())


def test_torn_last_line_is_skipped_with_one_warning(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path / "t.jsonl", [HEADER, *_calls(3)], tail=b'{"kind": "call", "ap')
    assert list(TraceFile(path).records()) == _calls(3)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{path}:5: skipped a torn last line" in err


def test_complete_last_line_without_newline_is_kept(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path / "t.jsonl", [HEADER], tail=orjson.dumps(_calls(1)[0]))
    assert list(TraceFile(path).records()) == _calls(1)
    assert capsys.readouterr().err == ""


def test_empty_and_torn_header_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(EmptyTraceError, match="empty file"):
        _ = TraceFile(empty).header
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(orjson.dumps(HEADER)[:10])
    with pytest.raises(EmptyTraceError, match="torn header"):
        _ = TraceFile(torn).header
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b"garbage\n" + orjson.dumps(HEADER) + b"\n")
    with pytest.raises(TraceFormatError) as info:
        _ = TraceFile(broken).header
    assert not isinstance(info.value, EmptyTraceError)


def test_header_only_file_has_no_records(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [HEADER])
    assert list(TraceFile(path).records()) == []
