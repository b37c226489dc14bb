"""GradCleared: the grad a step applies was cleared since the parameter's previous step. Learned
from a plain loop, it holds for loops that break "backward finds the grad zero" on purpose (a GAN
whose generator loss runs through the discriminator, gradient accumulation, L-BFGS's closure) and
catches a forgotten ``zero_grad`` at the first step that applies a stale grad."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import MLP, collect_in_process

from traincheck_agent.check.offline import check_offline
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.relations import grad_cleared
from traincheck_agent.inference.stream import TraceSource

GAN = str(Path(__file__).parent.parent / "scripts" / "generalization" / "pipelines" / "toy_gan.py")
PARAMS = {"model.backbone.0.weight", "model.backbone.0.bias", "model.backbone.2.weight", "model.backbone.2.bias",
          "model.head.weight", "model.head.bias"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("grad_cleared")
    runs = {
        "reference": (MLP, "--steps", "8"),
        "accumulation": (MLP, "--steps", "4", "--accumulate", "3", "--seed", "2"),
        "grads_to_zero": (MLP, "--steps", "4", "--grads-to-zero", "--seed", "3"),
        "lbfgs": (MLP, "--steps", "4", "--optimizer", "lbfgs", "--seed", "4"),
        "gan": (GAN, "--steps", "5", "--batch-size", "16"),
        "no_zero_grad": (MLP, "--steps", "4", "--bug", "no-zero-grad"),
    }
    for name, (script, *args) in runs.items():
        collect_in_process(script, root / name, *args)
    return {name: root / name for name in runs}


@pytest.fixture(scope="module")
def learned(runs):
    invariants, _ = infer_invariants([runs["reference"]])
    return [i for i in invariants if i.relation == "GradCleared"]


def test_a_plain_loop_teaches_it_with_no_precondition(learned):
    [invariant] = learned
    assert invariant.precondition == ()
    assert invariant.subject == {"event": "optimizer.step", "attribute": "grad", "effect": "cleared_between_steps"}
    assert invariant.support["passing"] == 6 * 7  # six parameters, every step after the first
    assert invariant.id.startswith("gc-")


@pytest.mark.parametrize("variant", ["accumulation", "grads_to_zero", "lbfgs", "gan"])
def test_loops_that_clear_their_grads_their_own_way_pass(runs, learned, variant):
    assert check_offline(learned, [runs[variant]]) == []


def test_a_forgotten_zero_grad_is_caught_at_the_first_step_that_applies_a_stale_grad(runs, learned):
    violations = check_offline(learned, [runs["no_zero_grad"]])
    assert {v["step"] for v in violations} == {1, 2, 3}
    assert {v["variable"] for v in violations if v["step"] == 1} == PARAMS
    assert "is zero_grad called every step?" in violations[0]["message"]


# --- what one example needs, on records made by hand ------------------------------------------

UNHASHED = {"h": "nostorage:", "zero": False, "nonfinite": False}


def _state(where: str, var: str, step: int, grad: dict | None, call: int = 0) -> dict:
    return {"kind": "state", "where": where, "var": var, "vtype": "Parameter", "step": step, "call": call,
            "phase": "train", "attrs": {"grad": grad}}


def _examples(records: list[dict]) -> list[tuple[int, bool]]:
    collector = grad_cleared.Collector(TraceSource("t", "run", 0))
    return [(e.step, e.cleared) for r in records for e in collector.feed(r)]


def _iteration(step: int, cleared: bool, stepped: bool = True, var: str = "w") -> list[dict]:
    """One iteration of parameter ``var``: maybe a zero_grad, a backward that adds to its grad
    (hash ``b<step>`` to ``a<step>``), maybe a step."""
    before = None if cleared else {"h": f"b{step}"}
    records = [*([_state("after:zero_grad", var, step, None)] if cleared else []),
               _state("before:backward", var, step, before, call=100 + step),
               _state("after:backward", var, step, {"h": f"a{step}"}, call=100 + step)]
    if stepped:
        records += [_state("before:optimizer.step", var, step, {"h": f"a{step}"}, call=step),
                    _state("after:optimizer.step", var, step, {"h": f"a{step}"}, call=step)]
    return records


def test_each_step_after_the_first_is_judged_by_what_happened_since_the_one_before():
    assert _examples([*_iteration(0, True), *_iteration(1, True), *_iteration(2, False)]) == [(1, True), (2, False)]


def test_steps_several_iterations_apart_are_judged_and_a_gap_in_the_snapshots_forgets():
    # An optimizer that steps every other iteration: the grads of both iterations add up.
    every_other = [*_iteration(0, True), *_iteration(1, True, stepped=False), *_iteration(2, False)]
    assert _examples(every_other) == [(2, True)]
    assert _examples([*_iteration(0, True), *_iteration(1, False, stepped=False), *_iteration(2, False)]) == [(2, False)]
    # No snapshot at all at step 2 (sampled out): the step at 3 says nothing.
    assert _examples([*_iteration(0, True), *_iteration(1, False), *_iteration(3, False)]) == [(1, False)]


def test_a_grad_set_to_none_by_hand_counts_as_cleared():
    hand = [_state("before:backward", "w", 1, None, call=101), _state("after:backward", "w", 1, {"h": "a1"}, call=101),
            _state("before:optimizer.step", "w", 1, {"h": "a1"}, call=1)]
    assert _examples([*_iteration(0, True), *hand]) == [(1, True)]


def test_an_unhashed_grad_and_a_second_step_in_one_iteration_give_no_example():
    unhashed = [_state(r["where"], "w", 1, UNHASHED if r["attrs"]["grad"] else None, r["call"])
                for r in _iteration(1, True)]
    assert _examples([*_iteration(0, True), *unhashed]) == []
    second = [_state("before:optimizer.step", "w", 0, {"h": "a0"}, call=9)]
    assert _examples([*_iteration(0, True), *second, *_iteration(1, True)]) == [(1, True)]


def test_a_grad_the_program_assigns_is_not_judged():
    """``p.grad = ...`` (averaged in from worker copies, say): a backward of the workers leaves the
    global model's grad as it was, and replacing it is that program's way of clearing it."""
    rounds = [[_state("before:backward", "w", step, {"h": f"g{step - 1}"}, call=100 + step),
               _state("after:backward", "w", step, {"h": f"g{step - 1}"}, call=100 + step),
               _state("before:optimizer.step", "w", step, {"h": f"g{step}"}, call=step)] for step in range(1, 5)]
    assert _examples([r for records in rounds for r in records]) == []
