"""Resource bounds in real runs: the trace file's size limit, and an output directory that
cannot be written. Neither may change the training or stop check mode from checking."""

from __future__ import annotations

import json
import os

import pytest
from conftest import PIPELINES, agent_env, collect_mlp_here, plain_losses, read_traces, run_parallel

from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import write_invariants

# Every test here starts Python child processes (real training under the agent, launchers, the
# startup hook, the CLI): the slow tier.
pytestmark = pytest.mark.slow

MLP = str(PIPELINES / "mlp_train.py")
STEPS = ["--steps", "12"]
LIMIT_MB = 0.08


def _losses(stdout: str) -> list[float]:
    return json.loads(stdout.strip().splitlines()[-1])["losses"]


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("[traincheck] warning:")]


@pytest.fixture(scope="module")
def plain() -> dict[str, list[float]]:
    return {"clean": plain_losses(*STEPS), "buggy": plain_losses(*STEPS, "--bug", "no-zero-grad")}


@pytest.fixture(scope="module")
def inv(tmp_path_factory) -> str:
    """Invariants of a clean 10-step reference, in a file."""
    root = tmp_path_factory.mktemp("reference")
    invariants, files = infer_invariants([collect_mlp_here(root, "ref", "--steps", "10")])
    write_invariants(invariants, root / "inv.json", [str(f) for f in files])
    return str(root / "inv.json")


def test_trace_size_limit_stops_writing_and_says_so_once(plain, tmp_path):
    out = tmp_path / "out"
    full = tmp_path / "full"
    limited, unlimited = run_parallel(
        ([MLP, *STEPS], agent_env("collect", out, TRAINCHECK_MAX_TRACE_MB=str(LIMIT_MB), TRAINCHECK_FLUSH_RECORDS="50")),
        ([MLP, *STEPS], agent_env("collect", full, TRAINCHECK_FLUSH_RECORDS="50")))
    assert limited.returncode == 0 and unlimited.returncode == 0, limited.stderr + unlimited.stderr
    assert _losses(limited.stdout) == _losses(unlimited.stdout) == plain["clean"]
    [warning] = _warnings(limited.stderr)
    assert "reached the size limit" in warning and "TRAINCHECK_MAX_TRACE_MB" in warning
    assert _warnings(unlimited.stderr) == []

    [path] = out.glob("trace_*.jsonl")
    lines = path.read_bytes().splitlines()
    written = sum(len(line) + 1 for line in lines[:-1])  # all but the closing note
    assert written <= LIMIT_MB * 2**20
    # The file keeps the longest beginning of the run that fits, whatever the batches were: less
    # room than one line is left unused.
    [full_path] = full.glob("trace_*.jsonl")
    assert LIMIT_MB * 2**20 - written < max(len(line) + 1 for line in full_path.read_bytes().splitlines())
    note = json.loads(lines[-1])
    [trace] = read_traces(out)
    [full_trace] = read_traces(full)
    kept = len(trace.records) - 1
    # The note counts lines (a snapshot point is one), the reader's records count variables.
    assert note == {**note, "kind": "note", "what": "dropped_records", "reason": "size_limit",
                    "count": len(full_path.read_bytes().splitlines()) - (len(lines) - 1)}

    def shape(records: list[dict]) -> list[tuple]:
        return [(r["kind"], r.get("api") or r.get("where"), r.get("var"), r.get("step")) for r in records]

    assert 0 < kept < len(full_trace.records)
    assert shape(trace.records[:kept]) == shape(full_trace.records[:kept])  # the run's beginning, as it was
    invariants, _ = infer_invariants([out])  # a capped trace is still a trace
    assert invariants


def test_check_mode_checks_what_the_size_limit_keeps_out_of_the_file(plain, inv, tmp_path):
    out = tmp_path / "out"
    [proc] = run_parallel(([MLP, *STEPS, "--bug", "no-zero-grad"], agent_env(
        "check", out, TRAINCHECK_INV=inv, TRAINCHECK_CHECK_TRACE="1",
        TRAINCHECK_MAX_TRACE_MB="0.005", TRAINCHECK_FLUSH_RECORDS="20")))
    assert proc.returncode == 0, proc.stderr
    assert _losses(proc.stdout) == plain["buggy"]
    assert any("reached the size limit" in w for w in _warnings(proc.stderr))
    violations = [v for line in (out / "violations-0.jsonl").read_text().splitlines()
                  if (v := json.loads(line)).get("event") != "coverage"]
    [trace] = read_traces(out)
    written_steps = {r.get("step") for r in trace.records if r["kind"] != "note"}
    assert max(v["step"] for v in violations) > max((s for s in written_steps if isinstance(s, int)), default=-2)


@pytest.mark.parametrize("mode", ["collect", "check"])
def test_unwritable_output_is_one_warning_and_the_training_runs_on(mode, plain, inv, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the output directory should be\n")
    env = {"TRAINCHECK_INV": inv} if mode == "check" else {}
    args = [MLP, *STEPS, *(["--bug", "no-zero-grad"] if mode == "check" else [])]
    [proc] = run_parallel((args, agent_env(mode, blocker / "out", **env)))
    assert proc.returncode == 0, proc.stderr
    assert _losses(proc.stdout) == plain["buggy" if mode == "check" else "clean"]
    warnings = _warnings(proc.stderr)
    assert len(warnings) == 1 and str(blocker) in warnings[0], proc.stderr
    assert blocker.read_text() == "a file where the output directory should be\n"
    if mode == "check":  # the violations still reach the user, on stderr
        assert "[traincheck] violation at rank 0 step 1: " in proc.stderr
    assert not os.path.exists(blocker / "out")


FULL_AT = 1 << 16  # bytes


def test_a_full_disk_under_the_violation_log_is_one_warning(plain, inv, tmp_path):
    """violations-0.jsonl can take no more bytes (the file-size limit is its current size, so every
    append fails as on a full disk, while small files elsewhere can still be written): one warning
    naming the file, the violations still on stderr, the training as it was."""
    out = tmp_path / "out"
    out.mkdir()
    log = out / "violations-0.jsonl"
    log.write_text("\n" * FULL_AT)
    limited = (f"import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_FSIZE, ({FULL_AT}, {FULL_AT})); "
               f"sys.argv = [{MLP!r}, *{[*STEPS, '--bug', 'no-zero-grad']!r}]; runpy.run_path({MLP!r}, run_name='__main__')")
    [proc] = run_parallel((["-c", limited], agent_env("check", out, TRAINCHECK_INV=inv)))
    assert proc.returncode == 0, proc.stderr
    assert _losses(proc.stdout) == plain["buggy"]
    [warning] = _warnings(proc.stderr)
    assert "cannot write violations to" in warning and "File too large" in warning
    assert "they are shown on stderr only" in warning
    assert "[traincheck] violation at rank 0 step 1: " in proc.stderr
    assert log.read_text() == "\n" * FULL_AT


def test_a_link_where_the_violation_log_goes_is_refused_with_one_warning(plain, inv, tmp_path):
    """A symbolic link in the log's place (to a device that is always full, here) is not
    followed: one warning, the violations on stderr, the training as it was."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "violations-0.jsonl").symlink_to("/dev/full" if os.path.exists("/dev/full") else tmp_path / "elsewhere")
    [proc] = run_parallel(([MLP, *STEPS, "--bug", "no-zero-grad"], agent_env("check", out, TRAINCHECK_INV=inv)))
    assert proc.returncode == 0, proc.stderr
    assert _losses(proc.stdout) == plain["buggy"]
    [warning] = _warnings(proc.stderr)
    assert "cannot write violations to" in warning and "a symbolic link is in its place" in warning
    assert "[traincheck] violation at rank 0 step 1: " in proc.stderr


GC_WATCH = str(PIPELINES / "gc_watch_train.py")


def test_records_die_young_so_the_training_gets_no_extra_full_collections(tmp_path):
    """Records handed on within a few steps are freed while young. Held for the whole flush
    interval (0.5 s), they were promoted to the oldest generation, and on the CNN example every
    ~250 steps a full collection (~150 ms, every object of the process) came due."""
    [ref] = run_parallel(([GC_WATCH, "--steps", "20"], agent_env("collect", tmp_path / "ref")))
    assert ref.returncode == 0, ref.stderr
    invariants, files = infer_invariants([tmp_path / "ref"])
    write_invariants(invariants, tmp_path / "inv.json", [str(f) for f in files])
    steps = ["--steps", "600", "--eval-every", "600"]
    counts = {}
    inv = str(tmp_path / "inv.json")
    runs = {"plain": (None, {}), "collect": ("collect", {}), "check": ("check", {"TRAINCHECK_INV": inv}),
            "check_process": ("check", {"TRAINCHECK_INV": inv, "TRAINCHECK_CHECKER": "process"})}
    for name, (mode, extra) in runs.items():
        [proc] = run_parallel(([GC_WATCH, *steps], agent_env(mode, tmp_path / name, **extra)))
        assert proc.returncode == 0, proc.stderr
        counts[name] = json.loads(proc.stdout.strip().splitlines()[-1])["full_collections"]
        if mode == "check":
            assert "no violations" in proc.stderr, proc.stderr
    assert all(count <= counts["plain"] for count in counts.values()), counts
