"""DeepSpeed ZeRO on 2 CPU ranks (gloo; torchrun, and DeepSpeed's own launcher): collect, infer,
check offline and online."""

from __future__ import annotations

import json
import socket
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import PIPELINES, agent_env, run_parallel, run_python, violations_in

from traincheck_agent.check.offline import check_offline
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import write_invariants
from traincheck_agent.trace.reader import TraceFile, find_trace_files

# Every test here starts Python child processes (real training under the agent, launchers, the
# startup hook, the CLI): the slow tier.
pytestmark = pytest.mark.slow


def _torchrun(out: Path, mode: str, *args: str, **env: str) -> Path:
    cmd = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", str(PIPELINES / "deepspeed_train.py"),
           *args]
    proc = run_python(cmd, agent_env(mode, out, OMP_NUM_THREADS="1", **env))
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("deepspeed")
    traces = [_torchrun(root / f"ref{seed}", "collect", "--stage", "1", "--seed", str(seed)) for seed in (0, 1)]
    invariants, files = infer_invariants(traces)
    inv_file = root / "inv.json"
    write_invariants(invariants, inv_file, [str(f) for f in files])
    return root, traces, invariants, inv_file


def test_the_engine_step_is_the_training_step(reference):
    _, traces, _, _ = reference
    for path in find_trace_files([traces[0]]):
        records = list(TraceFile(path).records())
        steps = [r for r in records if r["kind"] == "call" and r["api"] == "deepspeed.runtime.engine.DeepSpeedEngine.step"]
        assert [r["step"] for r in steps] == [0, 1, 2, 3, 4, 5]
        # Snapshots are of the user's model by its own name, not of ZeRO's flat fp32 partition,
        # with the hyper-parameters and settings of the ZeRO optimizer the engine steps.
        after: dict[str, set[str]] = defaultdict(set)
        for r in records:
            if r["kind"] == "state" and r["where"] == "after:optimizer.step":
                after[r["vtype"]].add(r["var"])
        assert after == {"Parameter": {f"model.{i}.{p}" for i in (0, 1, 3) for p in ("weight", "bias")},
                         "param_group": {"deepspeedzerooptimizer.param_groups.0"},
                         "optimizer_settings": {"deepspeedzerooptimizer.settings"}}


def test_replicas_are_equal_after_every_step_and_other_runs_check_clean(reference):
    root, _, invariants, _ = reference
    equal = {i.subject["event"] for i in invariants if i.relation == "CrossRankConsistent"
             and i.subject["attribute"] == "data" and not i.precondition}
    assert equal == {"before:optimizer.step", "after:optimizer.step"}
    stage2 = _torchrun(root / "stage2", "collect", "--stage", "2", "--seed", "4", "--steps", "8")
    assert check_offline(invariants, [stage2]) == []


def test_a_rank_whose_weights_drift_is_caught_at_the_next_step(reference):
    root, _, invariants, inv_file = reference
    bug = _torchrun(root / "drift", "collect", "--stage", "2", "--seed", "3", "--bug", "weights-drift-on-one-rank")
    [found] = check_offline(invariants, [bug])
    assert (found["step"], found["variable"], found["ranks"]) == (3, "model.1.weight", [0, 1])
    online = _torchrun(root / "online", "check", "--stage", "1", "--seed", "3", "--bug", "weights-drift-on-one-rank",
                       TRAINCHECK_INV=str(inv_file))
    [record] = [v for line in (online / "violations-0.jsonl").read_text().splitlines()
                if (v := json.loads(line)).get("event") != "coverage"]
    assert (record["step"], record["variable"], record["ranks"]) == (3, "model.1.weight", [0, 1])


def test_a_rank_that_does_not_clip_its_partition_is_caught_at_the_first_step(reference):
    """ZeRO clips each rank's gradient partition on that rank. A rank whose config has no
    clipping updates its partition unclipped, and the all-gather still leaves every rank's
    weights equal: only the optimizer's settings tell, clip_grad differs across the ranks."""
    root, _, invariants, inv_file = reference
    assert any(i.relation == "CrossRankConsistent" and i.subject["attribute"] == "clip_grad" for i in invariants)
    online = _torchrun(root / "no-clip", "check", "--stage", "2", "--seed", "3", "--bug", "no-clipping-on-one-rank",
                       TRAINCHECK_INV=str(inv_file))
    records = [v for line in (online / "violations-0.jsonl").read_text().splitlines()
               if (v := json.loads(line)).get("event") != "coverage"]
    assert {r["evidence"]["subject"]["attribute"] for r in records} == {"clip_grad"}
    first = min(records, key=lambda r: r["step"])
    assert (first["step"], first["ranks"], first["evidence"]["values"]) == (0, [0, 1], {"0": "1.0", "1": "0.0"})
    assert "clip_grad 1.0 on rank 0, clip_grad 0.0 on rank 1" in first["message"]


def test_gradient_accumulation_micro_steps_are_not_missing_updates(reference):
    """With 2 micro-batches per step, ``engine.step()`` updates every second call: the calls off
    the boundary are marked ``accumulating``, do not advance the step, and the invariants learned
    without accumulation (every engine step calls the ZeRO optimizer's step) do not judge them."""
    root, _, invariants, _ = reference
    accumulate = _torchrun(root / "accumulate", "collect", "--stage", "2", "--seed", "5", "--accumulate", "2")
    [path, *_] = find_trace_files([accumulate])
    steps = [r for r in TraceFile(path).records()
             if r["kind"] == "call" and r["api"] == "deepspeed.runtime.engine.DeepSpeedEngine.step"]
    assert [(r["step"], (r.get("ctx") or {}).get("accumulating", False)) for r in steps[:4]] == [
        (0, True), (0, False), (1, True), (1, False)]
    contains = [i for i in invariants if i.relation == "EventContain"
                and i.subject["api"] == "deepspeed.runtime.engine.DeepSpeedEngine.step"]
    assert contains and all("accumulating = False" in i.description for i in contains)
    assert check_offline(invariants, [accumulate]) == []


def test_bf16_weights_with_fp32_master_copies(tmp_path):
    """DeepSpeed's BF16 mode (bf16 weights, fp32 master partitions): a ZeRO-1 reference's
    invariants check a ZeRO-2 run clean and catch a rank whose weights drift."""
    refs = [_torchrun(tmp_path / "ref0", "collect", "--bf16", "--stage", "1", "--seed", "0")]
    invariants, _ = infer_invariants(refs)
    [path, *_] = find_trace_files([refs[0]])
    weights = [r for r in TraceFile(path).records() if r["kind"] == "state" and r["var"] == "model.1.weight"]
    assert {r["attrs"]["dtype"] for r in weights} == {"bfloat16"}
    clean = _torchrun(tmp_path / "stage2", "collect", "--bf16", "--stage", "2", "--seed", "4")
    assert check_offline(invariants, [clean]) == []
    drift = _torchrun(tmp_path / "drift", "collect", "--bf16", "--stage", "2", "--seed", "3",
                      "--bug", "weights-drift-on-one-rank")
    found = [v for v in check_offline(invariants, [drift]) if v["relation"] == "CrossRankConsistent"]
    assert [(v["step"], v["variable"], v["ranks"]) for v in found] == [(3, "model.1.weight", [0, 1])]


def test_the_deepspeed_launcher_runs_the_same_checks(reference):
    """``deepspeed --num_gpus 2 train.py`` (its runner and per-node launcher start the ranks and
    pass --local_rank): both ranks share one run id, and the invariants learned under torchrun
    check a clean run clean and catch the drifting rank at the same step."""
    root, _, invariants, inv_file = reference
    script = str(PIPELINES / "deepspeed_train.py")

    def deepspeed(out: Path, *args: str) -> tuple[list[str], dict[str, str]]:
        with socket.socket() as probe:  # a free port each: the two jobs run side by side
            probe.bind(("127.0.0.1", 0))
            port = str(probe.getsockname()[1])
        cmd = ["-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", port, script, "--stage", "2",
               *args]
        return cmd, agent_env("check", out, OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu", TRAINCHECK_INV=str(inv_file),
                              TRAINCHECK_CHECK_TRACE="1")

    clean, drift = run_parallel(deepspeed(root / "ds_clean", "--seed", "6"),
                                deepspeed(root / "ds_drift", "--seed", "3", "--bug", "weights-drift-on-one-rank"))
    for proc in (clean, drift):
        assert proc.returncode == 0, proc.stderr
    headers = [TraceFile(path).header for path in find_trace_files([root / "ds_clean"])]
    assert sorted(h["rank"] for h in headers) == [0, 1] and len({h["run_id"] for h in headers}) == 1
    assert "check summary (rank 0): no violations" in clean.stderr
    assert "check summary (rank 1): no violations" in clean.stderr
    log = root / "ds_drift" / "violations-0.jsonl"
    assert log.exists(), drift.stderr
    [record] = violations_in(log)
    assert (record["step"], record["variable"], record["ranks"]) == (3, "model.1.weight", [0, 1])
