"""Optimizer steps given a closure (``optimizer.step(closure)``): PyTorch Lightning runs each
iteration's forward and backward inside the step, L-BFGS evaluates the closure several times per
step. Such a step contains a whole iteration:

- its ``before`` snapshot is taken when the closure first returns (the grads the step applies),
  not at its entry (the previous iteration's grads), and an L-BFGS step stays one step;
- the calls its closure makes count as the loop's calls of the iteration (``zero_grad`` between
  two steps);
- the grad after a step that evaluated its closure again is not the step's doing;

so invariants learned from plain loops hold on clean closure-driven runs, and a bug in one is
still caught.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import (
    PIPELINES,
    agent_env,
    collect_in_one_child,
    collect_in_process,
    run_parallel,
    run_script,
)

from traincheck_agent.check.offline import check_offline
from traincheck_agent.inference.coverage import Coverage
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import Invariant, write_invariants
from traincheck_agent.inference.relations import api_sequence
from traincheck_agent.inference.stream import TraceSource

MLP = str(PIPELINES / "mlp_train.py")
LIGHTNING = str(PIPELINES / "lightning_train.py")


def _check(invariants: list[Invariant], target: Path) -> tuple[list[dict], Coverage]:
    coverage = Coverage()
    return check_offline(invariants, [target], coverage=coverage), coverage


def _judged(invariants: list[Invariant], coverage: Coverage, relation: str, **subject: str) -> int:
    """How many examples the invariants of ``relation`` whose subject has ``subject`` judged."""
    ids = {i.id for i in invariants
           if i.relation == relation and all(i.subject.get(k) == v for k, v in subject.items())}
    assert ids, f"no {relation} invariant with {subject} was learned"
    return sum(coverage.checked.get(i, 0) for i in ids)


def _ids(violations: list[dict]) -> set[tuple[str, str]]:
    return {(v["relation"], v["message"].split(":")[0]) for v in violations}


# -- the agent: where a closure step's state is taken -------------------------------------------

def test_an_lbfgs_step_is_one_step_and_its_before_state_is_the_closures(agent_in_process, tmp_path):
    agent = agent_in_process("collect", out_dir=tmp_path / "lbfgs")
    run_script(MLP, "--steps", "3", "--optimizer", "lbfgs", "--lbfgs-iters", "3")
    trace = agent.trace()
    steps = trace.calls("torch.optim.LBFGS.step")
    assert [c["step"] for c in steps] == [0, 1, 2]
    assert all(c["parent"] is None and c["ctx"].get("closure") is True for c in steps)
    # Each step evaluated its closure three times, all inside the step: no boundary inside it.
    zero_grads = trace.calls("torch.optim.Optimizer.zero_grad")
    assert [c["step"] for c in zero_grads] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert {c["parent"] for c in zero_grads if c["step"] == 0} == {steps[0]["id"]}
    assert not [r for r in trace.records if r["kind"] == "note" and r.get("what") == "step_boundary"]
    [weight] = {r["var"] for r in trace.states("before:optimizer.step") if r["var"].endswith(".head.weight")}
    for step, call in enumerate(steps):
        [before] = [r for r in trace.states("before:optimizer.step", weight) if r["call"] == call["id"]]
        [after] = [r for r in trace.states("after:optimizer.step", weight) if r["call"] == call["id"]]
        first_backward = [r for r in trace.states("after:backward", weight) if r["step"] == step][0]
        assert before["closure_calls"] == 1 and after["closure_calls"] == 3
        # The grads the step applies: those of its closure's first backward, not the last step's.
        assert before["attrs"]["grad"]["h"] == first_backward["attrs"]["grad"]["h"]
        assert before["attrs"]["data"]["h"] != after["attrs"]["data"]["h"]


def test_a_step_without_closure_records_what_it_did(agent_in_process, tmp_path):
    """A plain loop's step: the snapshot at its entry, no closure fields anywhere."""
    agent = agent_in_process("collect", out_dir=tmp_path / "plain")
    run_script(MLP, "--steps", "2", "--optimizer", "sgd")
    trace = agent.trace()
    assert all("closure" not in (c.get("ctx") or {}) for c in trace.calls())
    assert all("closure_calls" not in r for r in trace.states())
    assert trace.states("before:optimizer.step")


def test_a_closure_that_raises_reaches_the_caller_unchanged(agent_in_process, tmp_path):
    import torch

    agent = agent_in_process("collect", out_dir=tmp_path / "raising")
    param = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([param], lr=0.1)
    failure = KeyError("from the closure")

    def closure():
        raise failure

    with pytest.raises(KeyError) as raised:
        optimizer.step(closure)
    assert raised.value is failure

    def good():
        optimizer.zero_grad()
        loss = (param * 2).sum()
        loss.backward()
        return loss

    assert optimizer.step(good).item() == pytest.approx(6.0)
    assert torch.allclose(param.detach(), torch.full((3,), 0.8))
    states = agent.trace().states("before:optimizer.step")
    # The raising step took none; the other one took it when its closure returned.
    assert len({r["call"] for r in states}) == 1 and {r["closure_calls"] for r in states} == {1}


# -- the relations: a closure step's calls and grads --------------------------------------------

def _call(call_id: int, api: str, step: int, parent: int | None = None, **ctx: bool) -> dict:
    record = {"kind": "call", "id": call_id, "parent": parent, "thread": 1, "api": api, "step": step,
              "args": {"self": {"t": "Adam"}} if api.startswith("torch.optim") else {}}
    if ctx:
        record["ctx"] = ctx
    return record


def _intervals(records: list[dict]) -> list[api_sequence.Interval]:
    collector = api_sequence.Collector(TraceSource("t", "run", 0))
    out = [e for r in records for e in collector.feed(r)]
    return [e for e in out if isinstance(e, api_sequence.Interval)]


def test_the_direct_children_of_a_closure_step_are_the_iterations_calls():
    step, zero_grad, forward = "torch.optim.Adam.step", "torch.optim.Optimizer.zero_grad", "__main__.Net.forward"
    records = []
    for s in range(3):
        base = 10 * s
        records += [_call(base + 2, "torch.nn.Linear.forward", s, parent=base + 1),
                    _call(base + 1, forward, s, parent=base), _call(base + 3, zero_grad, s, parent=base)]
        records.append(_call(base, step, s, closure=True))
    intervals = _intervals(records)
    assert [i.apis for i in intervals] == [frozenset({step, zero_grad, forward})]
    assert (zero_grad, "Adam") in intervals[0].receivers
    # Without the closure mark the same nesting is a step's own business: only the step counts.
    plain = _intervals([{k: v for k, v in r.items() if k != "ctx"} for r in records])
    assert [i.apis for i in plain] == [frozenset({step})]


# -- whole runs: clean closure-driven loops against plain-loop references, and bugs -------------

@pytest.fixture(scope="module")
def loops(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("closure_loops")
    runs = {
        "adam": ["--steps", "8"],
        "sgd": ["--steps", "8", "--optimizer", "sgd", "--seed", "3"],
        "sgd_closure": ["--steps", "8", "--optimizer", "sgd", "--closure", "--seed", "4"],
        "lbfgs": ["--steps", "6", "--optimizer", "lbfgs"],
        "lbfgs2": ["--steps", "6", "--optimizer", "lbfgs", "--seed", "1"],
        "lbfgs_frozen_bug": ["--steps", "6", "--optimizer", "lbfgs", "--seed", "2", "--bug", "optimizer-over-frozen"],
    }
    for name, args in runs.items():
        collect_in_process(MLP, root / name, *args, threads=1)
    return {name: root / name for name in runs}


def test_clean_closure_loops_pass_plain_loop_invariants(loops):
    for reference in ("adam", "sgd"):
        invariants, _ = infer_invariants([loops[reference]])
        for target in ("sgd_closure", "lbfgs"):
            violations, coverage = _check(invariants, loops[target])
            assert violations == [], (reference, target, violations[:3])
            # Judged, not skipped: what steps do to data and grads.
            assert _judged(invariants, coverage, "StateTransition", event="optimizer.step", attribute="data") > 0
            assert _judged(invariants, coverage, "GradApplied") > 0
    sgd_invariants, _ = infer_invariants([loops["sgd"]])
    violations, coverage = _check(sgd_invariants, loops["sgd_closure"])
    # The same optimizer with and without a closure: zero_grad between steps is judged too.
    assert _judged(sgd_invariants, coverage, "APISequence", api="torch.optim.Optimizer.zero_grad") >= 5
    assert _judged(sgd_invariants, coverage, "StateTransition", event="optimizer.step", attribute="grad") > 0


def test_lbfgs_against_its_own_reference_and_a_bug_in_it(loops):
    invariants, _ = infer_invariants([loops["lbfgs"]])
    violations, _ = _check(invariants, loops["lbfgs2"])
    assert violations == [], violations[:3]
    for reference in (invariants, infer_invariants([loops["sgd"]])[0]):
        violations, _ = _check(reference, loops["lbfgs_frozen_bug"])
        caught = [v for v in violations if v["relation"] == "GradApplied"]
        assert caught and all(".head." in v["variable"] for v in caught), violations[:5]


@pytest.fixture(scope="module")
def lightning(tmp_path_factory) -> dict[str, Path]:
    """Lightning runs in child processes (Lightning stays out of the pytest process), and a plain
    MLP loop as the other reference."""
    root = tmp_path_factory.mktemp("lightning")
    runs = {
        "clean": ["--steps", "8"],
        "clean2": ["--steps", "7", "--seed", "1"],
        "head_not_optimized": ["--steps", "6", "--seed", "2", "--bug", "head-not-optimized"],
        "no_zero_grad": ["--steps", "6", "--seed", "3", "--bug", "no-zero-grad"],
        "accumulate": ["--steps", "6", "--seed", "5", "--accumulate", "3"],
    }
    collect_in_one_child(LIGHTNING, {root / name: args for name, args in runs.items()}, OMP_NUM_THREADS="1")
    collect_in_process(MLP, root / "mlp", "--steps", "8", threads=1)
    return {name: root / name for name in [*runs, "mlp"]}


@pytest.mark.slow
def test_a_clean_lightning_run_passes_plain_loop_invariants(lightning):
    invariants, _ = infer_invariants([lightning["mlp"]])
    violations, coverage = _check(invariants, lightning["clean"])
    assert violations == [], violations[:3]
    assert _judged(invariants, coverage, "StateTransition", event="optimizer.step", attribute="grad") > 0
    assert _judged(invariants, coverage, "APISequence", api="torch.optim.Optimizer.zero_grad") >= 5
    assert _judged(invariants, coverage, "GradApplied") > 0


@pytest.mark.slow
def test_a_lightning_reference_checks_a_clean_lightning_run(lightning):
    invariants, _ = infer_invariants([lightning["clean"]])
    violations, coverage = _check(invariants, lightning["clean2"])
    assert violations == [], violations[:3]
    assert coverage.totals()[0] > 100


@pytest.mark.slow
def test_bugs_in_lightning_runs_are_caught(lightning):
    for reference in ("clean", "mlp"):
        invariants, _ = infer_invariants([lightning[reference]])
        violations, _ = _check(invariants, lightning["head_not_optimized"])
        unapplied = [v for v in violations if v["relation"] == "GradApplied"]
        assert unapplied and {v["variable"] for v in unapplied} == {"pl_module.head.weight", "pl_module.head.bias"}
        violations, _ = _check(invariants, lightning["no_zero_grad"])
        assert ("APISequence", "torch.optim.Optimizer.zero_grad is called between two consecutive "
                               "torch.optim.Adam.step calls") in _ids(violations), reference


@pytest.mark.slow
def test_lightning_accumulating_grad_batches_is_judged_like_a_plain_loop(lightning):
    """With ``accumulate_grad_batches=3`` Lightning runs two batches' closures outside any step
    and the third inside ``optimizer.step``: the step applies all three grads, cleared once.
    (A forgotten zero_grad under accumulation is caught the same way: checked by hand, not here,
    to spare the suite a Lightning start-up.)"""
    invariants, _ = infer_invariants([lightning["mlp"]])
    violations, coverage = _check(invariants, lightning["accumulate"])
    assert violations == [], violations[:3]
    assert _judged(invariants, coverage, "GradCleared") >= 6 * 4  # six parameters, the steps after the first
    assert _judged(invariants, coverage, "GradApplied") > 0
    assert _judged(invariants, coverage, "StateTransition", event="optimizer.step", attribute="data") > 0
    # A Lightning reference without accumulation says nothing about what the closure calls (it
    # clears grads only in the window's first batch, outside the step, when it accumulates).
    lightning_invariants, _ = infer_invariants([lightning["clean"]])
    violations, _ = _check(lightning_invariants, lightning["accumulate"])
    assert violations == [], violations[:3]
    # Without accumulation, Lightning's steps that apply stale grads are caught from step 1 on.
    violations, _ = _check(invariants, lightning["no_zero_grad"])
    stale = [v for v in violations if v["relation"] == "GradCleared"]
    assert stale and min(v["step"] for v in stale) == 1, violations[:3]


@pytest.mark.slow
def test_lightning_is_checked_online(lightning, tmp_path):
    """Check mode replaces the closure in the running step: clean stays quiet, the bug is caught."""
    invariants, files = infer_invariants([lightning["mlp"]])
    inv = tmp_path / "inv.json"
    write_invariants(invariants, inv, [str(f) for f in files])
    jobs = {"clean": ["--steps", "6", "--seed", "4"], "bug": ["--steps", "6", "--seed", "4", "--bug", "head-not-optimized"]}
    procs = run_parallel(*(([LIGHTNING, *args], agent_env("check", tmp_path / name, TRAINCHECK_INV=str(inv),
                                                         OMP_NUM_THREADS="1")) for name, args in jobs.items()),
                         timeout=400)
    clean, bug = procs
    assert clean.returncode == 0 and bug.returncode == 0, (clean.stderr[-2000:], bug.stderr[-2000:])
    assert "[traincheck] violation" not in clean.stderr, clean.stderr[-2000:]
    assert "[traincheck] violation" in bug.stderr and "pl_module.head" in bug.stderr, bug.stderr[-2000:]
    # The runs trained alike: the agent changed nothing in the clean one.
    assert len(json.loads(clean.stdout.strip().splitlines()[-1])["losses"]) == 6
