"""The integrations people ask for, end to end as a user runs them: collect a clean reference,
``traincheck infer``, then check online (``TRAINCHECK_MODE=check``) a clean run that differs
legitimately (another seed, learning rate, schedule) and a buggy one.

- the HF ``Trainer`` with nothing added by the user: a clean run with a warm-up from a zero
  learning rate, gradient accumulation and no clipping stays quiet; an optimizer over the
  transformer blocks only is caught at step 0 by the grads that no step applies;
- ranks started by the script itself with ``torch.multiprocessing.spawn``: a clean run with
  other data stays quiet on both ranks; grads clipped on rank 0 only (after DDP averaged them)
  are caught at the step it starts, with the grads that differ before ``optimizer.step`` first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import PIPELINES, agent_env, run_parallel, run_python

from traincheck_agent.report.html import read_violations
from traincheck_agent.report.sentences import plural
from traincheck_agent.report.triage import Group, causes, judged_counts, triage

# Child processes: real training under the agent, and the CLI.
pytestmark = pytest.mark.slow

HF = str(PIPELINES / "hf_trainer_train.py")
SPAWN = str(PIPELINES / "spawn_ddp_train.py")


def _infer(reference: Path, inv: Path) -> None:
    proc = run_python(["-m", "traincheck_agent", "infer", str(reference), "-o", str(inv)], agent_env(None, None))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(inv.read_text())["invariants"], proc.stderr


def _violations(out: Path) -> list[dict]:
    """The violation records of a check (the coverage record that closes each log left out)."""
    records = [json.loads(line) for path in sorted(out.glob("violations-*.jsonl"))
               for line in path.read_text().splitlines()]
    return [r for r in records if r.get("event") != "coverage"]


def _groups(out: Path, rank: int | None = None) -> list[Group]:
    """The ranked groups of a check's violations (of one rank's file when ``rank`` is given),
    with the examples judged where they broke, as the check's own summary ranks them."""
    stats: list[dict] = []
    records, _ = read_violations(out if rank is None else out / f"violations-{rank}.jsonl", stats)
    return triage(records, judged=judged_counts(stats))


def _summaries(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "check summary" in line]


def test_hf_trainer_without_callbacks_end_to_end(tmp_path):
    ref, inv = tmp_path / "ref", tmp_path / "inv.json"
    [proc] = run_parallel(([HF, "--steps", "8", "--out", str(tmp_path / "ref-trainer")],
                           agent_env("collect", ref, OMP_NUM_THREADS="1")), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    _infer(ref, inv)

    clean, bug = tmp_path / "clean", tmp_path / "bug"
    runs = {
        # A linear warm-up starts at a learning rate of zero: its first step moves nothing.
        clean: ["--steps", "6", "--seed", "3", "--lr", "5e-4", "--warmup", "2", "--accumulate", "2",
                "--max-grad-norm", "0"],
        bug: ["--steps", "4", "--seed", "2", "--bug", "optimizer-over-blocks"],
    }
    procs = run_parallel(*(([HF, *args, "--out", str(tmp_path / f"{out.name}-trainer")],
                            agent_env("check", out, TRAINCHECK_INV=str(inv), OMP_NUM_THREADS="1"))
                           for out, args in runs.items()), timeout=300)
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-2000:]
    clean_proc, bug_proc = procs

    assert _violations(clean) == [], clean_proc.stderr[-3000:]
    [summary] = _summaries(clean_proc.stderr)
    assert "no violations" in summary

    found = _violations(bug)
    assert found and min(r["step"] for r in found) == 0
    unapplied = {r["variable"] for r in found if r["relation"] == "GradApplied"}
    assert {"model.transformer.wte.weight", "model.transformer.ln_f.weight"} <= unapplied
    assert not any(".transformer.h." in name for name in unapplied)  # the optimizer's own
    groups = _groups(bug)
    top = groups[0]
    assert (top.relation, top.first_step) == ("GradApplied", 0)
    [summary] = _summaries(bug_proc.stderr)
    assert f"likely cause first ({plural(len(causes(groups)), 'group')}): {top.sentence}" in summary


def test_spawned_ranks_end_to_end(tmp_path):
    ref, inv = tmp_path / "ref", tmp_path / "inv.json"
    [proc] = run_parallel(([SPAWN, "--steps", "6"], agent_env("collect", ref, OMP_NUM_THREADS="1")))
    assert proc.returncode == 0, proc.stderr
    assert len(list(ref.glob("trace_*.jsonl"))) == 2
    _infer(ref, inv)

    clean, bug = tmp_path / "clean", tmp_path / "bug"
    runs = {clean: ["--steps", "4", "--seed", "1"],
            bug: ["--steps", "4", "--seed", "2", "--bug", "clip-on-rank0", "--bug-from", "2"]}
    procs = run_parallel(*(([SPAWN, *args], agent_env("check", out, TRAINCHECK_INV=str(inv), OMP_NUM_THREADS="1"))
                           for out, args in runs.items()))
    for proc in procs:
        assert proc.returncode == 0, proc.stderr
    clean_proc, bug_proc = procs

    assert _violations(clean) == [], clean_proc.stderr
    summaries = _summaries(clean_proc.stderr)
    assert len(summaries) == 2 and all("no violations" in s for s in summaries), summaries

    found = _violations(bug)
    drift = [r for r in found if r["relation"] == "CrossRankConsistent"]
    assert drift and min(r["step"] for r in found) == 2, bug_proc.stderr
    first = [r for r in drift if r["step"] == 2]
    assert {r["evidence"]["subject"]["event"] for r in first} >= {"before:optimizer.step"}
    assert not any(r["evidence"]["subject"]["event"] == "after:backward" for r in first)  # DDP's average held
    top = _groups(bug, rank=0)[0]  # rank 0 compares the ranks, and its summary says so
    assert (top.relation, top.subject, top.first_step) == ("CrossRankConsistent", "before:optimizer.step", 2)
    [summary] = [s for s in _summaries(bug_proc.stderr) if "(rank 0)" in s]
    assert f": {top.sentence}" in summary.split("likely cause first", 1)[1], summary
