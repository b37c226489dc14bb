"""What real training scripts get wrong, on a nanoGPT-style loop (``pipelines/gpt_train.py``):
the model builds its own AdamW, the lr is set by hand (warm-up, cosine, then ``min_lr`` for
good), grads are clipped, and the model is evaluated every few iterations. Each bug is one line
deep, as in a real script; each must be caught at the first step it affects with the cause on
top, while clean variants (a schedule that reaches its floor within the run) stay quiet."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import (
    PIPELINES,
    agent_env,
    collect_in_one_child,
    collect_in_process,
    read_traces,
    run_python,
)

from traincheck_agent.check.offline import check_offline
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import Invariant, write_invariants
from traincheck_agent.report.triage import triage
from traincheck_agent.report.violations import violation_record

# Every test here starts Python child processes (real training under the agent, launchers, the
# startup hook, the CLI): the slow tier.
pytestmark = pytest.mark.slow

GPT = str(PIPELINES / "gpt_train.py")
RUNS = {
    "ref": ["--steps", "12"],
    "ref2": ["--steps", "10", "--seed", "1", "--eval-every", "3"],
    # min_lr from iteration 6 on: the references never reached their floor
    "clean_floor": ["--steps", "12", "--seed", "3", "--decay-iters", "6"],
    "clean_other": ["--steps", "9", "--seed", "4", "--batch", "4", "--lr", "1e-3", "--min-lr", "1e-4"],
    "clip_zero": ["--steps", "9", "--seed", "2", "--bug", "clip-zero", "--bug-from", "5"],
    "stuck_in_eval": ["--steps", "9", "--seed", "2", "--bug", "stuck-in-eval"],
    "over_blocks": ["--steps", "6", "--seed", "2", "--bug", "optimizer-over-blocks"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gpt")
    outs = {name: root / name for name in RUNS}
    for name, args in RUNS.items():  # one after another, in this process
        collect_in_process(GPT, outs[name], *args, threads=1)
    return outs


@pytest.fixture(scope="module")
def invariants(runs) -> list[Invariant]:
    found, _ = infer_invariants([runs["ref"], runs["ref2"]])
    return found


def _top(invariants: list[Invariant], trace: Path):
    by_id = {inv.id: inv for inv in invariants}
    violations = check_offline(invariants, [trace])
    records = [violation_record(v, by_id.get(v["invariant"]), rank=0, run_id=None) for v in violations]
    groups = triage(records, by_id)
    return violations, groups[0] if groups else None


@pytest.mark.parametrize("clean", ["clean_floor", "clean_other"])
def test_clean_variants_stay_quiet(runs, invariants, clean):
    assert check_offline(invariants, [runs[clean]]) == []


def test_clipping_to_zero_is_caught_at_its_first_step(runs, invariants):
    violations, top = _top(invariants, runs["clip_zero"])
    assert min(v["step"] for v in violations) == 5
    assert top.relation == "GradApplied" and top.first_step == 5
    assert "reaches optimizer.step with a non-zero grad" in top.expected
    assert top.variables and all(name.startswith("model.") for name in top.variables)
    clipped = {v["variable"] for v in violations if v["relation"] == "GradApplied"}
    assert {"model.transformer.wte.weight", "model.lm_head.weight"} <= clipped


def test_training_stuck_in_eval_mode_is_caught_at_the_first_step_it_takes(runs, invariants):
    violations, top = _top(invariants, runs["stuck_in_eval"])
    assert min(v["step"] for v in violations) == 4
    assert top.relation == "UpdateMode" and top.first_step == 4


def test_an_optimizer_over_the_blocks_only_is_caught_at_the_first_step(runs, invariants):
    violations, top = _top(invariants, runs["over_blocks"])
    assert min(v["step"] for v in violations) == 0
    assert top.relation == "GradApplied" and top.first_step == 0
    unapplied = {v["variable"] for v in violations if v["relation"] == "GradApplied"}
    assert {"model.transformer.wte.weight", "model.transformer.wpe.weight", "model.lm_head.weight"} <= unapplied
    assert not any(name.startswith("model.transformer.h.") for name in unapplied)  # the optimizer's own


HF = str(PIPELINES / "hf_trainer_train.py")


def test_hf_trainer_with_an_optimizer_over_the_blocks_only(tmp_path):
    """The HF Trainer, unchanged, on a GPT-2 built from a config: a custom optimizer over the
    transformer blocks leaves the embeddings' and the final norm's grads unapplied from step 0,
    while a clean run with another seed and lr stays quiet."""
    runs = {"ref": ["--steps", "8"], "ref2": ["--steps", "6", "--seed", "1"],
            "clean": ["--steps", "6", "--seed", "3", "--lr", "5e-4"],
            "bug": ["--steps", "5", "--seed", "2", "--bug", "optimizer-over-blocks"]}
    outs = {name: tmp_path / name for name in runs}
    collect_in_one_child(HF, {outs[name]: [*args, "--out", str(tmp_path / f"{name}-trainer")]
                              for name, args in runs.items()}, OMP_NUM_THREADS="1")
    invariants, _ = infer_invariants([outs["ref"], outs["ref2"]])
    assert check_offline(invariants, [outs["clean"]]) == []
    violations, top = _top(invariants, outs["bug"])
    assert min(v["step"] for v in violations) == 0
    assert top.relation == "GradApplied" and top.first_step == 0
    unapplied = {v["variable"] for v in violations if v["relation"] == "GradApplied"}
    assert {"model.transformer.wte.weight", "model.transformer.ln_f.weight"} <= unapplied
    assert not any(".transformer.h." in name for name in unapplied)


MANUAL = str(PIPELINES / "manual_update_lm.py")


def test_a_loop_without_an_optimizer_counts_its_steps_and_a_dropped_zero_grad_is_caught(tmp_path):
    """word_language_model's default loop: no torch.optim, updates through ``.data``. Its steps
    follow the updates by hand, so invariants about steps are learned, a dropped
    ``model.zero_grad()`` is caught at the first step without it, and the summary says which
    boundary the steps followed."""
    runs = {"ref": ["--steps", "8"], "ref2": ["--steps", "6", "--seed", "1"],
            "clean": ["--steps", "6", "--seed", "3", "--lr", "1.0"]}
    outs = {name: tmp_path / name for name in runs}
    for name, args in runs.items():
        collect_in_process(MANUAL, outs[name], *args, threads=1)
    [trace] = read_traces(outs["ref"])
    assert sorted({c["step"] for c in trace.calls("torch.Tensor.backward")}) == list(range(8))
    assert [c["step"] for c in trace.calls("torch.nn.Module.zero_grad")] == list(range(8))
    notes = [r for r in trace.records if r.get("kind") == "note" and r.get("what") == "step_boundary"]
    assert [n["boundary"] for n in notes] == ["manual_update"]

    invariants, _ = infer_invariants([outs["ref"], outs["ref2"]])
    assert check_offline(invariants, [outs["clean"]]) == []
    inv = tmp_path / "inv.json"
    write_invariants(invariants, inv, [])
    bug = run_python([MANUAL, "--steps", "6", "--seed", "2", "--bug", "no-zero-grad"],
                     agent_env("check", tmp_path / "bug", TRAINCHECK_INV=str(inv), OMP_NUM_THREADS="1"))
    assert bug.returncode == 0, bug.stderr
    [summary] = [line for line in bug.stderr.splitlines() if "check summary" in line]
    assert "steps counted at parameter updates by hand (no optimizer stepped)" in summary
    violations = [json.loads(line) for line in (tmp_path / "bug" / "violations-0.jsonl").read_text().splitlines()]
    found = [v for v in violations if v.get("step") is not None and v.get("relation")]
    assert found and min(v["step"] for v in found) == 1
    assert "likely cause first" in summary and re.search(r"at steps? 1\b", summary)
