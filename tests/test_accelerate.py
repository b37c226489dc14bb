"""Accelerate on CPU, one process and two (torchrun): gradient accumulation is not taken for
missing updates, a misplaced ``zero_grad`` under accumulation is caught, and so is a process
whose gradients differ from the other's."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import PIPELINES, agent_env, run_python

from traincheck_agent.check.offline import check_offline
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.trace.reader import TraceFile, find_trace_files

# Every test here starts Python child processes (real training under the agent, launchers, the
# startup hook, the CLI): the slow tier.
pytestmark = pytest.mark.slow

SCRIPT = str(PIPELINES / "accelerate_train.py")


def _run(out: Path, mode: str, *args: str, processes: int = 1, **env: str) -> Path:
    cmd = [SCRIPT, *args] if processes == 1 else [
        "-m", "torch.distributed.run", f"--nproc_per_node={processes}", "--standalone", SCRIPT, *args]
    proc = run_python(cmd, agent_env(mode, out, OMP_NUM_THREADS="1", **env))
    assert proc.returncode == 0, proc.stderr
    out.mkdir(parents=True, exist_ok=True)
    (out / "stderr.txt").write_text(proc.stderr)
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("accelerate")
    traces = [_run(root / f"ref{seed}", "collect", "--seed", str(seed), "--batches", "8") for seed in (0, 1)]
    invariants, _ = infer_invariants(traces)
    return root, invariants


def test_accumulation_steps_are_not_missing_updates(reference):
    root, invariants = reference
    run = _run(root / "accumulate", "collect", "--seed", "2", "--batches", "8", "--accumulate", "2")
    [path] = find_trace_files([run])
    records = list(TraceFile(path).records())
    steps = [r for r in records if r["kind"] == "call" and r["api"] == "accelerate.optimizer.AcceleratedOptimizer.step"]
    # Every batch calls the wrapped step; every second one updates, and only those advance the step.
    assert [(r["step"], (r.get("ctx") or {}).get("accumulating", False)) for r in steps] == [
        (s, micro) for s in range(4) for micro in (True, False)]
    assert [r["step"] for r in records if r["kind"] == "state" and r["where"] == "after:optimizer.step"
            and r["var"] == "net.0.weight"] == [0, 1, 2, 3]
    assert check_offline(invariants, [run]) == []


def test_zero_grad_before_backward_under_accumulation_is_caught(reference):
    root, invariants = reference
    bug = _run(root / "bug", "collect", "--seed", "2", "--batches", "8", "--accumulate", "2", "--bug", "zero-grad-first")
    violations = check_offline(invariants, [bug])
    first = min(v["step"] for v in violations)
    assert first == 1  # the first batch of the second step starts from the first step's gradients
    assert any("backward finds the grad None or zero" in v["message"] for v in violations if v["step"] == first)


@pytest.fixture(scope="module")
def two_process_invariants(tmp_path_factory) -> Path:
    from traincheck_agent.inference.invariant import write_invariants

    root = tmp_path_factory.mktemp("accelerate2")
    reference = _run(root / "ref", "collect", "--batches", "6", processes=2)
    invariants, files = infer_invariants([reference])
    assert any(i.relation == "CrossRankConsistent" for i in invariants)
    inv_file = root / "inv.json"
    write_invariants(invariants, inv_file, [str(f) for f in files])
    return inv_file


def test_two_processes_check_clean_online(tmp_path, two_process_invariants):
    out = _run(tmp_path / "check", "check", "--seed", "1", "--batches", "6", "--accumulate", "2", processes=2,
               TRAINCHECK_INV=str(two_process_invariants))
    assert all(not p.read_text().strip() for p in out.glob("violations-*.jsonl"))
    summaries = [line for line in (out / "stderr.txt").read_text().splitlines() if "check summary" in line]
    assert len(summaries) == 2 and all("no violations" in line for line in summaries)


def test_a_process_whose_gradients_differ_is_caught_online_at_that_step(tmp_path, two_process_invariants):
    """The last process doubles its averaged gradients at step 2: rank 0 reports, at step 2,
    the gradients differing across the two ranks, naming each parameter, before the weights
    the step then updates differ too."""
    import json

    out = _run(tmp_path / "check", "check", "--seed", "1", "--batches", "6", "--bug", "grads-scaled-on-one-process",
               processes=2, TRAINCHECK_INV=str(two_process_invariants))
    found = [v for line in (out / "violations-0.jsonl").read_text().splitlines()
             if (v := json.loads(line)).get("event") != "coverage"]
    assert found and {v["relation"] for v in found} == {"CrossRankConsistent"}
    first = min(v["step"] for v in found)
    at_first = [v for v in found if v["step"] == first]
    assert first == 2 and all(v["ranks"] == [0, 1] for v in at_first)
    grads = {v["variable"] for v in at_first if v["evidence"]["subject"]["attribute"] == "grad"}
    assert grads >= {"net.0.weight", "net.2.weight"}, at_first
