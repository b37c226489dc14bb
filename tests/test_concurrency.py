"""Concurrency: Python threads calling wrapped APIs at once, DataLoader workers forked in the
middle of a run while those threads train, and hogwild training with torch.multiprocessing
(fork and spawn), in collect and in check mode.

What must hold for every run: it finishes in bounded time (a hang fails the test instead of
hanging the suite), exits 0, every line of every trace and violations file is a whole JSON
object (read raw, not through the reader that forgives a torn last line), each process writes
its own trace file, calls carry the id of the thread that made them and nest only inside calls
of the same thread, and a deterministic single-threaded part computes what it computes without
the agent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import PIPELINES, agent_env

# Every test here starts Python child processes (real training under the agent, launchers, the
# startup hook, the CLI): the slow tier.
pytestmark = pytest.mark.slow

THREADS = str(PIPELINES / "threads_train.py")
HOGWILD = str(PIPELINES / "hogwild_train.py")
RUN_TIMEOUT_S = 150

# name -> script arguments; the same runs happen in collect and in check mode.
RUNS = {
    "threads": [THREADS, "--threads", "4", "--steps", "25"],
    "hogwild-fork": [HOGWILD, "--start-method", "fork", "--procs", "2", "--steps", "15"],
    "hogwild-spawn": [HOGWILD, "--start-method", "spawn", "--procs", "2", "--steps", "15"],
}
# Check mode runs a bug that breaks learned invariants, so violations are written concurrently.
CHECK_ARGS = ["--bug", "no-zero-grad"]
MODES = ("collect", "check")
CASES = [(mode, name) for mode in MODES for name in RUNS]


@dataclass
class Run:
    name: str
    mode: str | None
    args: list[str]
    out: Path | None
    returncode: int | None  # None: killed after RUN_TIMEOUT_S
    stdout: str
    stderr: str

    def result(self) -> dict:
        return json.loads(self.stdout.strip().splitlines()[-1])

    def describe(self) -> str:
        what = "timed out (hang)" if self.returncode is None else f"exit status {self.returncode}"
        return f"{self.mode or 'plain'} {self.name}: {what}\n--- stderr tail ---\n{self.stderr[-3000:]}"


def _run_all(jobs: list[tuple[str, str | None, list[str], Path | None, dict[str, str]]]) -> list[Run]:
    """Run the jobs side by side, each in its own process group, each bounded in time."""
    started = []
    for name, mode, args, out, env in jobs:
        proc = subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        started.append((name, mode, args, out, proc))
    runs = []
    for name, mode, args, out, proc in started:
        try:
            stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the run and the processes it started
            stdout, stderr = proc.communicate()
            code = None
        runs.append(Run(name, mode, args, out, code, stdout, stderr))
    return runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str | None, str], Run]:
    root = tmp_path_factory.mktemp("concurrency")
    # Plain runs (the deterministic parts' reference) and collect runs, side by side.
    jobs = [(name, None, args, None, agent_env(None, None)) for name, args in RUNS.items()
            if name != "hogwild-spawn"]  # its deterministic part is hogwild-fork's
    jobs += [(name, "collect", args, root / f"collect-{name}", agent_env("collect", root / f"collect-{name}"))
             for name, args in RUNS.items()]
    done = {(r.mode, r.name): r for r in _run_all(jobs)}

    # Invariants learned with `traincheck infer` from the hogwild collect runs (processes, not
    # threads, so they do not depend on the thread-safety checked here).
    inv = root / "inv.json"
    refs = [str(root / f"collect-{name}") for name in ("hogwild-fork", "hogwild-spawn")]
    infer = subprocess.run([sys.executable, "-m", "traincheck_agent", "infer", *refs, "-o", str(inv)],
                           capture_output=True, text=True, timeout=120, env=agent_env(None, None))
    assert infer.returncode == 0, infer.stderr
    assert json.loads(inv.read_text())["invariants"], "the reference runs gave no invariants"

    jobs = [(name, "check", [*args, *CHECK_ARGS], root / f"check-{name}",
             agent_env("check", root / f"check-{name}", TRAINCHECK_INV=str(inv), TRAINCHECK_CHECK_TRACE="1"))
            for name, args in RUNS.items()]
    done.update({(r.mode, r.name): r for r in _run_all(jobs)})
    return done


def _ok(run: Run) -> Run:
    assert run.returncode == 0, run.describe()
    return run


def _raw_objects(path: Path) -> list[dict]:
    """Every line of ``path`` as a JSON object; any line that is not one fails the test."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), f"{path}: the last line is torn"
    objects = []
    for no, line in enumerate(data.split(b"\n")[:-1], 1):
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise AssertionError(f"{path}:{no}: not JSON ({exc}): {line[:200]!r}") from None
        assert isinstance(value, dict), f"{path}:{no}: not an object"
        objects.append(value)
    return objects


def _traces(out: Path) -> dict[Path, list[dict]]:
    files = sorted(out.glob("trace_*.jsonl"))
    assert files, f"no trace file in {out}"
    return {path: _raw_objects(path) for path in files}


# --- every run ------------------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "name"), CASES)
def test_run_finishes_with_exit_0(runs, mode, name):
    run = _ok(runs[(mode, name)])
    assert "Traceback" not in run.stderr, run.stderr
    assert "agent error" not in run.stderr, run.stderr


@pytest.mark.parametrize(("mode", "name"), CASES)
def test_every_line_of_every_file_is_json(runs, mode, name):
    run = runs[(mode, name)]
    assert run.out is not None
    traces = _traces(run.out)  # checked even when the run failed: what it left must be whole
    for path, records in traces.items():
        assert records[0]["kind"] == "header", path
        assert [r for r in records[1:] if r["kind"] == "header"] == [], f"{path}: a second header"
    violation_files = sorted(run.out.glob("violations-*.jsonl"))
    for path in violation_files:
        for record in _raw_objects(path):
            # violations, and the end-of-run coverage counts
            assert record.get("invariant") or record.get("relation") or record.get("event") == "coverage", path
    if mode == "check" and run.returncode == 0:
        # The bug run breaks the learned invariants: violations were written concurrently.
        assert violation_files, run.stderr[-2000:]
    _ok(run)


@pytest.mark.parametrize(("mode", "name"), CASES)
def test_each_process_has_its_own_file(runs, mode, name):
    run = _ok(runs[(mode, name)])
    traces = _traces(run.out)
    pids = [records[0]["pid"] for records in traces.values()]
    assert len(pids) == len(set(pids)), pids
    # Forked or spawned, the processes of one run share its run id.
    assert len({records[0]["run_id"] for records in traces.values()}) == 1
    for path, records in traces.items():
        assert path.name.endswith(f"_pid{records[0]['pid']}.jsonl"), path
    result = run.result()
    if name == "threads":
        # One training process; the forked DataLoader workers switch the agent off.
        assert len(traces) == 1, sorted(traces)
    else:
        assert sorted(pids) == sorted([result["main"], *result["children"]])
        for records in traces.values():
            # Every hogwild process trains: each records its own steps.
            assert any(r["kind"] == "call" and r["api"].endswith(".step") for r in records)


@pytest.mark.parametrize("mode", MODES)
def test_calls_carry_their_thread_ids(runs, mode):
    run = _ok(runs[(mode, "threads")])
    [records] = _traces(run.out).values()
    result = run.result()
    calls = [r for r in records if r["kind"] == "call"]
    by_thread = {}
    for call in calls:
        by_thread.setdefault(call["thread"], set()).add(call["api"])
    expected = {result["main"], *result["threads"].values()}
    assert expected <= set(by_thread), (sorted(expected), sorted(by_thread))
    if mode == "collect":  # check mode records only the calls its invariants need
        for ident in result["threads"].values():
            assert "torch.optim.Optimizer.zero_grad" in by_thread[ident], by_thread[ident]
            assert any(api.endswith(".step") for api in by_thread[ident]), by_thread[ident]


@pytest.mark.parametrize(("mode", "name"), CASES)
def test_calls_nest_within_their_own_thread(runs, mode, name):
    run = _ok(runs[(mode, name)])
    linked = 0
    for path, records in _traces(run.out).items():
        calls = {r["id"]: r for r in records if r["kind"] == "call"}
        for call in calls.values():
            assert call["t0_ns"] <= call["t1_ns"], call
            parent = calls.get(call["parent"]) if call["parent"] is not None else None
            if parent is None:
                continue
            linked += 1
            assert parent["thread"] == call["thread"], (path.name, parent, call)
            assert parent["t0_ns"] <= call["t0_ns"] <= call["t1_ns"] <= parent["t1_ns"], (parent, call)
    assert linked, "no nested calls were recorded"


@pytest.mark.parametrize(("mode", "name"), CASES)
def test_deterministic_part_is_unchanged(runs, mode, name):
    plain = _ok(runs[(None, "hogwild-fork" if name == "hogwild-spawn" else name)])
    run = _ok(runs[(mode, name)])
    assert run.result()["losses"] == plain.result()["losses"]
