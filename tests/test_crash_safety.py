"""Nothing recorded is lost when a real training run dies abruptly: what was flushed stays
readable, and violations already reported stay in the violation log. (The trace writer's own
exit paths are covered in test_trace_writer.py; these are whole training runs.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import PIPELINES, agent_env, read_traces, run_python

from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import write_invariants
from traincheck_agent.trace.reader import TraceFile, find_trace_files

# Every test here starts Python child processes (real training under the agent, launchers, the
# startup hook, the CLI): the slow tier.
pytestmark = pytest.mark.slow

MLP = str(PIPELINES / "mlp_train.py")


def _lines_parse(path: Path) -> list[dict]:
    raw = path.read_bytes()
    assert raw.endswith(b"\n"), f"{path} ends in a torn line"
    return [json.loads(line) for line in raw.splitlines()]


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _wait_for(proc: subprocess.Popen, prefix: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        if line.startswith(prefix):
            return
        assert time.monotonic() < deadline, f"no {prefix!r} line in time"
    raise AssertionError(f"the run ended before {prefix!r}: {proc.stderr.read()}")


def test_sigkill_in_check_mode_keeps_the_violations_already_reported(tmp_path):
    ref = tmp_path / "ref"
    proc = run_python([MLP, "--steps", "10"], agent_env("collect", ref))
    assert proc.returncode == 0, proc.stderr
    invariants, files = infer_invariants([ref])
    write_invariants(invariants, tmp_path / "inv.json", [str(f) for f in files])
    out = tmp_path / "out"
    proc = _start([MLP, "--steps", "100000", "--sleep-per-step", "0.05", "--bug", "no-zero-grad"],
                  agent_env("check", out, TRAINCHECK_INV=str(tmp_path / "inv.json"), TRAINCHECK_FLUSH_INTERVAL="0.05"))
    try:
        _wait_for(proc, "step 8")
        deadline = time.monotonic() + 60
        log = out / "violations-0.jsonl"
        while not (log.exists() and log.read_bytes().count(b"\n") >= 1):
            assert time.monotonic() < deadline, "no violation reported"
            time.sleep(0.05)
        before = log.read_bytes().count(b"\n")
        proc.kill()
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    violations = _lines_parse(out / "violations-0.jsonl")
    assert len(violations) >= before >= 1
    assert all(v["invariant"] and isinstance(v["step"], int) for v in violations)


def test_sigkill_in_collect_mode_leaves_every_flushed_step_readable(tmp_path):
    out = tmp_path / "out"
    proc = _start([MLP, "--steps", "100000", "--sleep-per-step", "0.05"],
                  agent_env("collect", out, TRAINCHECK_FLUSH_INTERVAL="0.05"))
    try:
        _wait_for(proc, "step 10")
        proc.kill()
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.communicate()
    [path] = find_trace_files([out])
    records = list(TraceFile(path).records())  # a torn last line is skipped, with a warning
    steps = sorted({r["step"] for r in records if r.get("kind") == "state" and r["where"] == "after:optimizer.step"})
    assert steps == list(range(len(steps))) and len(steps) >= 5  # flushed every 0.05 s, no gap


def test_os_exit_in_a_forked_child_keeps_what_the_child_flushed(tmp_path):
    """A forked worker that trains, lets one flush interval pass and leaves with os._exit: its
    own trace holds its records; the parent's trace is whole and has none of the child's."""
    script = tmp_path / "fork_train.py"
    script.write_text(textwrap.dedent("""
        import os, sys, time
        import torch
        from torch import nn

        model = nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def train(steps):
            for _ in range(steps):
                opt.zero_grad()
                model(torch.ones(3, 4)).sum().backward()
                opt.step()

        train(3)
        pid = os.fork()
        if pid == 0:
            train(5)
            time.sleep(0.5)  # several flush intervals
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        train(2)
        print("child status", status)
    """))
    out = tmp_path / "out"
    proc = run_python([str(script)], agent_env("collect", out, TRAINCHECK_FLUSH_INTERVAL="0.05"))
    assert proc.returncode == 0 and "child status 0" in proc.stdout, proc.stderr
    traces = {t.header["pid"]: t for t in read_traces(out)}
    assert len(traces) == 2
    for trace in traces.values():
        _lines_parse(trace.path)
    steps = {pid: len(t.calls("torch.optim.SGD.step")) for pid, t in traces.items()}
    assert sorted(steps.values()) == [5, 5]  # the child: its 5; the parent: 3 + 2
