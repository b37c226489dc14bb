"""VarPeriodicChange on traces collected from real CPU training with LR schedulers: the period
is learned, clean variants violate nothing, a forgotten or doubled ``scheduler.step()`` is
caught at the first step it shows, and sampled (sparse) snapshots are judged honestly."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import PIPELINES, collect_in_process, read_traces

from traincheck_agent.inference import stream
from traincheck_agent.inference.coverage import Coverage
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.relations import periodic_change as pc

SCHEDULED = str(PIPELINES / "scheduler_train.py")
# Snapshots at steps 0, 1, 2, then 5, 8, 11, 14: every pair after step 2 spans three steps.
SPARSE_POLICY = "version: 1\nsampling:\n  warmup_steps: 2\n  every: 3\n"
RUNS = {
    "step_ref": ("--steps", "12"),
    "step_ref2": ("--steps", "10", "--seed", "1", "--batch", "16"),
    "cosine_ref": ("--scheduler", "cosine", "--steps", "10"),
    "none_ref": ("--scheduler", "none", "--steps", "10"),
    "step_clean": ("--steps", "15", "--seed", "5", "--batch", "8"),
    "cosine_clean": ("--scheduler", "cosine", "--steps", "14", "--seed", "3", "--batch", "8"),
    "step_no_step": ("--steps", "8", "--bug", "no-scheduler-step"),
    "step_double": ("--steps", "8", "--bug", "double-scheduler-step"),
    "cosine_no_step": ("--scheduler", "cosine", "--steps", "6", "--bug", "no-scheduler-step"),
    # nanoGPT's schedule: warm-up, cosine decay, then min_lr for good; the references never reach it.
    "warmup_ref": ("--scheduler", "warmup-cosine", "--steps", "14"),
    "warmup_ref2": ("--scheduler", "warmup-cosine", "--steps", "12", "--seed", "1"),
    "warmup_flat": ("--scheduler", "warmup-cosine", "--steps", "14", "--seed", "3", "--decay-steps", "6"),
    "warmup_no_step": ("--scheduler", "warmup-cosine", "--steps", "8", "--bug", "no-scheduler-step"),
}
SPARSE_RUNS = {
    "sparse_step_clean": ("--steps", "15", "--seed", "7", "--batch", "8"),
    "sparse_step_no_step": ("--steps", "15", "--bug", "no-scheduler-step"),
    "sparse_cosine_no_step": ("--scheduler", "cosine", "--steps", "15", "--bug", "no-scheduler-step"),
}
LR_GROUP = "optimizer.param_groups.0"


@dataclass(frozen=True)
class Run:
    path: Path
    lrs: list[float]  # the lr of each step, as the script saw it


def _collect(root: Path, name: str, args: tuple[str, ...], **env: str) -> Run:
    out = root / name
    printed = collect_in_process(SCHEDULED, out, *args, threads=1, **env)
    return Run(out, json.loads(printed.strip().splitlines()[-1])["lrs"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    root = tmp_path_factory.mktemp("periodic")
    policy = root / "sparse.yaml"
    policy.write_text(SPARSE_POLICY)
    jobs = [(name, args, {}) for name, args in RUNS.items()]
    jobs += [(name, args, {"TRAINCHECK_POLICY": str(policy)}) for name, args in SPARSE_RUNS.items()]
    return {name: _collect(root, name, args, **env) for name, args, env in jobs}


def _infer(runs: dict[str, Run], *names: str, constants: bool = False) -> list[Invariant]:
    """The periodic invariants of the named runs, or with ``constants`` only the constant ones."""
    found = pc.infer(stream.collect(pc, [runs[n].path for n in names]), ())
    return [i for i in found if (i.subject["period"] == pc.CONSTANT) == constants]


def _only(invariants: list[Invariant]) -> Invariant:
    assert len(invariants) == 1, [i.description for i in invariants]
    return invariants[0]


def _violations(invariant: Invariant, run: Run) -> list[dict]:
    found = stream.check(pc, invariant, stream.collect(pc, [run.path]))
    return sorted((pc.violation(invariant, e) for e in found), key=lambda v: v["step"])


def test_the_trace_records_the_lr_of_every_step(runs):
    # The relation needs after:optimizer.step snapshots of the param groups under a scheduler.
    (trace,) = read_traces(runs["step_ref"].path)
    recorded = {r["step"]: r["attrs"]["lr"] for r in trace.states("after:optimizer.step", LR_GROUP)}
    assert recorded, "no after:optimizer.step snapshot of the param group under an LR scheduler"
    assert [recorded[s] for s in sorted(recorded)] == runs["step_ref"].lrs


def test_step_lr_period_is_learned(runs):
    inv = _only(_infer(runs, "step_ref", "step_ref2"))
    assert inv.relation == pc.RELATION and inv.precondition == ()
    assert inv.subject == {"event": "after:optimizer.step", "vtype": "param_group", "variable": LR_GROUP,
                           "attribute": "lr", "period": 3, "offset": 0}
    assert inv.support["changes"] == 6 and inv.support["excluded"] == 0 and inv.support["traces"] == 2
    assert "changes every 3 steps (at steps 3, 6, 9, ...) and stays constant in between" in inv.description


def test_per_step_schedule_is_learned(runs):
    inv = _only(_infer(runs, "cosine_ref"))
    assert (inv.subject["attribute"], inv.subject["period"], inv.subject["offset"]) == ("lr", 1, 0)
    assert inv.description.endswith("changes at every step")


def test_no_scheduler_or_disagreeing_references_give_no_invariant(runs):
    assert _infer(runs, "none_ref") == []  # lr, momentum ... never change: constants
    assert _infer(runs, "step_ref", "cosine_ref") == []  # one reference breaks the other's period


def test_attributes_that_never_change_are_constants(runs):
    constants = {i.subject["attribute"]: i for i in _infer(runs, "none_ref", constants=True)}
    assert "lr" in constants and "momentum" in constants
    assert constants["lr"].description.endswith("stays constant across steps")
    assert "lr" not in {i.subject["attribute"] for i in _infer(runs, "step_ref", constants=True)}
    # A schedule where the reference had none moves the lr by design: outside what the
    # reference showed, counted and never a violation.
    coverage = Coverage()
    lr = constants["lr"]
    assert stream.check(pc, lr, stream.collect(pc, [runs["step_clean"].path]), coverage) == []
    assert coverage.outside[lr.id] == coverage.checked.get(lr.id, 0) + coverage.outside[lr.id] > 0
    assert coverage.reasons[lr.id] == "lr_scheduled=True never seen"


def test_clean_variants_violate_nothing(runs):
    step = _only(_infer(runs, "step_ref", "step_ref2"))
    cosine = _only(_infer(runs, "cosine_ref"))
    assert _violations(step, runs["step_clean"]) == []
    assert _violations(step, runs["sparse_step_clean"]) == []
    assert _violations(cosine, runs["cosine_clean"]) == []


def test_another_schedulers_lr_is_outside_the_references_domain(runs):
    """A run whose schedule is another class (cosine where the references stepped a StepLR)
    changes its lr by design: not judged, counted with the reason."""
    step = _only(_infer(runs, "step_ref", "step_ref2"))
    assert step.domain == {"lr_scheduled": [True], "lr_scheduler": ["StepLR"]}
    coverage = Coverage()
    assert stream.check(pc, step, stream.collect(pc, [runs["cosine_clean"].path]), coverage) == []
    assert coverage.reasons[step.id] == "lr_scheduler=CosineAnnealingLR never seen" and not coverage.checked


def test_forgotten_scheduler_step_is_caught_at_the_first_due_change(runs):
    step = _only(_infer(runs, "step_ref", "step_ref2"))
    violations = _violations(step, runs["step_no_step"])
    assert [v["step"] for v in violations] == [3, 6]
    assert violations[0]["variable"] == LR_GROUP
    assert violations[0]["trace"].startswith("trace_")
    assert violations[0]["message"].endswith("lr stayed 0.1 at step 3, where a change was expected")
    cosine = _only(_infer(runs, "cosine_ref"))
    assert [v["step"] for v in _violations(cosine, runs["cosine_no_step"])] == [1, 2, 3, 4, 5]


def test_a_schedule_settled_at_its_floor_is_not_judged_and_a_forgotten_step_still_is(runs):
    every_step = _only(_infer(runs, "warmup_ref", "warmup_ref2"))
    assert every_step.subject["period"] == 1
    flat = runs["warmup_flat"]
    assert flat.lrs[6:] == [flat.lrs[6]] * 8 and flat.lrs[6] < flat.lrs[5]  # the clean run's floor
    assert _violations(every_step, flat) == []
    examples = stream.collect(pc, [flat.path])[pc.invariant_key(every_step)]
    held = [e.step for e in examples if pc.outside(every_step, e) == pc.HELD_AT_BOUND]
    assert held == list(range(7, 14))  # counted as not covered, with the reason
    assert [v["step"] for v in _violations(every_step, runs["warmup_no_step"])] == list(range(1, 8))


def test_double_scheduler_step_is_caught_at_the_first_early_change(runs):
    step = _only(_infer(runs, "step_ref", "step_ref2"))
    violations = _violations(step, runs["step_double"])
    assert [v["step"] for v in violations] == [2, 5]  # it changes at 2, 3, 5, 6: twice as often
    assert violations[0]["message"].endswith("lr changed from 0.1 to 0.05 at step 2, where no change was expected")


def test_sampled_steps_are_judged_only_where_the_gap_decides(runs):
    step = _only(_infer(runs, "step_ref", "step_ref2"))
    # Each gap (2, 5], (5, 8] ... holds exactly one due change: a missing one is certain.
    violations = _violations(step, runs["sparse_step_no_step"])
    assert [v["step"] for v in violations] == [5, 8, 11, 14]
    assert violations[0]["message"].endswith("lr stayed 0.1 between steps 2 and 5, where a change was expected at step 3")
    # Every step changes the cosine lr: over a 3-step gap it may have come back, so only the
    # adjacent warmup steps are judged.
    cosine = _only(_infer(runs, "cosine_ref"))
    assert [v["step"] for v in _violations(cosine, runs["sparse_cosine_no_step"])] == [1, 2]
    # A sparse reference merges in: the same invariant, its gap pairs judged too.
    merged = _only(_infer(runs, "step_ref", "sparse_step_clean"))
    assert merged.id == _only(_infer(runs, "step_ref")).id
    assert merged.support["unjudged"] == 0 and merged.support["traces"] == 2


def test_inference_is_deterministic(runs):
    first = [i.to_json() for i in _infer(runs, "step_ref", "step_ref2", "sparse_step_clean")]
    second = [i.to_json() for i in _infer(runs, "sparse_step_clean", "step_ref2", "step_ref")]
    assert first == second


def _example(prev_step: int, step: int, before: float, after: float, trace: str = "t") -> pc.ChangeExample:
    return pc.ChangeExample("after:optimizer.step", "param_group", LR_GROUP, "lr", prev_step, step,
                            before, after, trace, (("phase", "train"),))


def _group(values: dict[int, float]) -> dict[pc.Key, list[pc.ChangeExample]]:
    steps = sorted(values)
    examples = [_example(a, b, values[a], values[b]) for a, b in zip(steps, steps[1:], strict=False)]
    return {("after:optimizer.step", "param_group", LR_GROUP, "lr"): examples}


def test_expected_changes_counts_due_steps_in_a_gap():
    assert [pc.expected_changes(a, b, 3, 0) for a, b in [(2, 3), (3, 4), (2, 5), (5, 8), (1, 8)]] == [1, 0, 1, 1, 2]
    assert [pc.expected_changes(a, b, 4, 1) for a, b in [(0, 1), (1, 5), (1, 4)]] == [1, 1, 0]
    assert pc.expected_changes(10, 13, 1, 0) == 3


def test_irregular_or_rare_changes_are_not_periodic():
    irregular = {s: 0.1 * 0.5 ** sum(s >= m for m in (3, 6, 10)) for s in range(13)}
    assert pc.infer(_group(irregular), ()) == []  # gaps 3 and 4: no period explains them
    rare = {s: 0.1 * 0.5 ** sum(s >= m for m in (4, 8)) for s in range(10)}
    assert pc.infer(_group(rare), ()) == []  # two changes are too few
    every_other = {s: 0.1 * 0.5 ** (s // 2) for s in range(12)}
    inv = _only(pc.infer(_group(every_other), ()))
    assert (inv.subject["period"], inv.subject["offset"]) == (2, 0)


def test_online_checker_agrees_with_the_offline_check(runs):
    """The online checker only feeds the collector the snapshots of watched variables
    (``record_filter``); its verdicts are still those of the offline check."""
    from traincheck_agent.check.online import OnlineChecker
    from traincheck_agent.trace.reader import TraceFile, find_trace_files

    step = _only(_infer(runs, "step_ref", "step_ref2"))
    for name in ("step_no_step", "step_double", "step_clean"):
        found: list[dict] = []
        checker = OnlineChecker([step], found.append)
        (path,) = find_trace_files([runs[name].path])
        trace = TraceFile(path)
        checker.feed(trace.header)
        for record in trace.records():
            checker.feed(record)
        checker.finish()
        offline = [(v["step"], v["message"]) for v in _violations(step, runs[name])]
        assert sorted((v["step"], v["message"]) for v in found) == offline, name
