"""The ``traincheck`` command line: help, version, ``trace summary`` and ``demo`` wiring."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path

import orjson
import pytest

from traincheck_agent import __version__
from traincheck_agent.cli import main
from traincheck_agent.trace.summary import summarize

REPO = Path(__file__).resolve().parents[1]


def _line(record: dict) -> bytes:
    return orjson.dumps(record) + b"\n"


def _trace(out: Path, rank: int | None, pid: int, records: list[dict]) -> Path:
    header = {"kind": "header", "schema": 1, "run_id": "runA", "rank": rank, "pid": pid}
    path = out / f"trace_runA_rank{rank}_pid{pid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(_line(r) for r in [header, *records]))
    return path


def _call(api: str, step: int, phase: str = "train") -> dict:
    return {"kind": "call", "api": api, "step": step, "phase": phase, "id": 0}


def _state(var: str, step: int, phase: str = "train") -> dict:
    return {"kind": "state", "var": var, "step": step, "phase": phase}


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    out = tmp_path / "traces"
    _trace(
        out,
        0,
        100,
        [
            _call("torch.nn.Linear.forward", -1, "init"),
            *[_call("torch.optim.Adam.step", s) for s in range(5)],
            *[_state("model.fc.weight", s) for s in range(5)],
            {"kind": "note", "what": "dropped_records", "count": 1},
        ],
    )
    # rank learned late: the header says nothing, a process record says 1
    _trace(
        out / "nested",
        None,
        200,
        [
            _call("torch.optim.Adam.step", 0),
            {"kind": "process", "rank": 1, "world_size": 2, "backend": "gloo"},
            _call("torch.optim.Adam.step", 1, "eval"),
        ],
    )
    return out


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCHECK_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "traincheck_agent", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_summarize(traces: Path) -> None:
    result = summarize([traces])
    assert result["files"] == 2 and result["skipped"] == []
    rank0 = result["runs"]["runA"][0]
    assert rank0["records"] == {"state": 5, "call": 6, "header": 1, "note": 1}
    assert rank0["calls"] == {"torch.optim.Adam.step": 5, "torch.nn.Linear.forward": 1}
    assert rank0["states"] == {"model.fc.weight": 5}
    assert rank0["steps"] == {"min": 0, "max": 4, "distinct": 5}
    assert rank0["phases"] == {"train": 10, "init": 1}
    assert rank0["pids"] == [100]
    rank1 = result["runs"]["runA"][1]
    assert rank1["world_size"] == 2
    assert rank1["steps"] == {"min": 0, "max": 1, "distinct": 2}
    assert rank1["phases"] == {"eval": 1, "train": 1}
    assert [Path(f).name for f in rank1["files"]] == ["trace_runA_rankNone_pid200.jsonl"]


def test_summary_text(traces: Path, capsys) -> None:
    assert main(["trace", "summary", str(traces)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 trace file(s)")
    table = out.splitlines()
    head = next(i for i, line in enumerate(table) if line.startswith("run "))
    assert table[head].split() == [
        "run", "rank", "files", "records", "calls", "states", "steps", "(distinct)", "phases",
    ]  # fmt: skip
    assert table[head + 1].split() == ["runA", "0", "1", "13", "6", "5", "0..4", "(5)", "train:10", "init:1"]  # fmt: skip
    assert table[head + 2].split()[:3] == ["runA", "1", "1"]
    assert "5  torch.optim.Adam.step" in out
    assert "model.fc.weight" in out


@pytest.mark.slow
def test_summary_json(traces: Path) -> None:
    result = _cli("trace", "summary", "--json", str(traces))
    assert result.returncode == 0, result.stderr
    data = orjson.loads(result.stdout)
    assert data["files"] == 2
    assert data["runs"]["runA"]["0"]["calls"]["torch.optim.Adam.step"] == 5


@pytest.mark.slow
def test_malformed_trace_exits_2_without_traceback(traces: Path) -> None:
    bad = traces / "trace_runA_rank0_pid100.jsonl"
    lines = bad.read_bytes().splitlines(keepends=True)
    lines.insert(3, b'{"kind": "call", broken\n')
    bad.write_bytes(b"".join(lines))
    result = _cli("trace", "summary", str(traces))
    assert result.returncode == 2
    assert result.stderr.startswith(f"traincheck: error: {bad}:4: line is not valid JSON")
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_not_a_trace_exits_2(tmp_path: Path, capsys) -> None:
    path = tmp_path / "trace_x_rank0_pid1.jsonl"
    path.write_text('{"kind": "call"}\n')
    assert main(["trace", "summary", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"traincheck: error: {path}:1: first record")


def test_missing_path_and_no_traces_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["trace", "summary", str(tmp_path / "missing")]) == 2
    assert "missing: no such file or directory" in capsys.readouterr().err
    assert main(["trace", "summary", str(tmp_path)]) == 2
    assert "no trace files" in capsys.readouterr().err


def test_torn_last_line_still_summarises(traces: Path, capsys) -> None:
    path = traces / "trace_runA_rank0_pid100.jsonl"
    path.write_bytes(path.read_bytes() + b'{"kind": "ca')
    assert main(["trace", "summary", str(traces)]) == 0
    captured = capsys.readouterr()
    assert "torn last line" in captured.err
    assert "runA" in captured.out


def test_empty_file_is_skipped(traces: Path, capsys) -> None:
    (traces / "trace_runA_rank3_pid300.jsonl").write_bytes(b"")
    assert main(["trace", "summary", str(traces)]) == 0
    captured = capsys.readouterr()
    assert "3 trace file(s), 1 skipped" in captured.out
    assert "empty file" in captured.err


def test_version(capsys) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"traincheck {__version__}"


@pytest.mark.parametrize(
    "args", [["--help"], ["trace", "--help"], ["trace", "summary", "--help"], ["demo", "--help"]]
)
def test_help_everywhere(args: list[str], capsys) -> None:
    assert main(args) == 0
    assert "usage: traincheck" in capsys.readouterr().out


@pytest.mark.parametrize("args", [[], ["trace"], ["trace", "summary"], ["bogus"]])
def test_incomplete_commands_exit_2(args: list[str], capsys) -> None:
    assert main(args) == 2
    assert "usage: traincheck" in capsys.readouterr().err


def test_demo_calls_run_demo_lazily(monkeypatch, tmp_path: Path) -> None:
    calls = []
    fake = types.ModuleType("traincheck_agent.cli.demo")
    fake.run_demo = lambda out_dir, steps: calls.append((out_dir, steps)) or 0
    monkeypatch.setitem(sys.modules, "traincheck_agent.cli.demo", fake)
    assert main(["demo", "--out", str(tmp_path / "d"), "--steps", "3"]) == 0
    assert calls == [(tmp_path / "d", 3)]
    assert main(["demo", "--steps", "0"]) == 2


@pytest.mark.slow
def test_python_dash_m_version() -> None:
    result = _cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"traincheck {__version__}"


@pytest.mark.slow
def test_demo_runs_the_whole_loop_for_real(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "traincheck_agent", "demo", "--out", str(tmp_path / "d"),
                           "--steps", "12"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "d" / "invariants.json").is_file()
    assert "violations, the first at step 1" in proc.stdout  # caught online, while it trained
    assert "[traincheck]" in proc.stderr  # the live lines of the checked run
    shown = proc.stdout.split("groups, likely root cause first:")[1].split("$ traincheck report")[0].splitlines()
    numbered = [line for line in shown if re.match(r" *\d+\. ", line)]
    # One fault, one group: stale grads on every parameter, with its hint; the missing call the
    # call-order invariant saw is shown with it, not as a group of its own.
    assert len(numbered) == 1 and numbered[0].startswith("  1. backward found grads left over"), shown
    assert "     hint: grads were not cleared before backward: is `optimizer.zero_grad()` called every step?" in shown
    assert any(line.startswith("     also #") and "zero_grad" in line for line in shown)
    assert (tmp_path / "d" / "check" / "violations-0.jsonl").is_file()
    assert (tmp_path / "d" / "report.html").is_file()
