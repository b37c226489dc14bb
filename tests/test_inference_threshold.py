"""Threshold inference on traces collected from real CPU runs: the generate limit is learned
from clean references, a clean variant with other seeds and limits breaks nothing, an
off-by-one decoding loop is caught at the steps it overshoots, and plain training yields no
incidental bounds."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import PIPELINES, agent_env, run_python

from traincheck_agent.inference import stream
from traincheck_agent.inference.relations import threshold
from traincheck_agent.inference.relations.threshold import CallExample
from traincheck_agent.trace.reader import find_trace_files

GENERATE = str(PIPELINES / "generate_train.py")
MLP = str(PIPELINES / "mlp_train.py")
POLICY = str(PIPELINES / "generate_policy.yaml")
API = "tiny_generate.generate"
GROWTH = ("ret.shape[1] - prompt.shape[1]", "<=", "max_new_tokens")
LENGTH = ("ret.shape[1]", "<=", "max_length")


def _collect(root: Path, name: str, script: str, *args: str) -> tuple[Path, dict[str, Any]]:
    out = root / name
    env = agent_env("collect", out, TRAINCHECK_POLICY=POLICY, OMP_NUM_THREADS="1")
    proc = run_python([script, *args], env)
    assert proc.returncode == 0, proc.stderr
    return out, json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("threshold")
    wanted = {
        "reference": (GENERATE, "--steps", "6", "--seed", "0"),
        "reference2": (GENERATE, "--steps", "6", "--seed", "1"),
        "clean": (GENERATE, "--steps", "5", "--seed", "7", "--max-new", "12", "--calls-per-step", "4"),
        "overshoot": (GENERATE, "--steps", "4", "--bug", "overshoot"),
        "mlp": (MLP, "--steps", "6"),
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(_collect, root, name, *cmd) for name, cmd in wanted.items()}
        return {name: future.result() for name, future in futures.items()}


def _infer(*dirs: Path):
    files = find_trace_files(dirs)
    return threshold.infer(stream.collect(threshold, files), tuple(sorted(f.name for f in files)))


@pytest.fixture(scope="module")
def learned(runs):
    return _infer(runs["reference"][0], runs["reference2"][0])


def _key(inv) -> tuple[str, str, str]:
    return inv.subject["property"], inv.subject["op"], inv.subject["argument"]


@pytest.mark.slow
def test_the_generate_limits_are_learned(learned):
    for inv in learned:
        print(inv.id, inv.description, inv.support)
    assert {inv.subject["api"] for inv in learned} == {API}
    found = {_key(inv): inv for inv in learned}
    assert set(found) == {GROWTH, LENGTH}  # nothing about the batch size or the temperature
    growth = found[GROWTH]
    assert growth.id.startswith("th-") and growth.precondition == ()
    assert growth.description == f"{API} keeps ret.shape[1] - prompt.shape[1] <= its argument max_new_tokens"
    for inv in learned:
        # Reached at several limits, and some calls stopped early at EOS.
        assert inv.support["bound_values"] >= 3 and 2 <= inv.support["attained"] < inv.support["passing"]


@pytest.mark.slow
def test_inference_is_deterministic(runs, learned):
    again = _infer(runs["reference2"][0], runs["reference"][0])
    assert [inv.to_json() for inv in again] == [inv.to_json() for inv in learned]


@pytest.mark.slow
def test_a_clean_variant_with_other_limits_violates_nothing(runs, learned):
    out, report = runs["clean"]
    assert max(g.get("max_new_tokens", 0) for g in report["generations"]) > 8  # beyond the references
    examples = stream.collect(threshold, [out])
    assert len(examples[API]) == len(report["generations"])
    assert [e for inv in learned for e in stream.check(threshold, inv, examples)] == []


@pytest.mark.slow
def test_the_overshooting_loop_is_caught_at_its_steps(runs, learned):
    out, report = runs["overshoot"]
    examples = stream.collect(threshold, [out])
    found = sorted(((e.step, inv, e) for inv in learned for e in stream.check(threshold, inv, examples)),
                   key=lambda item: (item[0], item[1].id))
    over = [g for g in report["generations"] if g["over_limit"]]
    assert over and [step for step, _, _ in found] == sorted(g["step"] for g in over)
    kinds = {_key(inv) for _, inv, _ in found}
    assert kinds == {GROWTH, LENGTH}  # both ways of giving the limit are overshot
    step, inv, example = found[0]
    record = threshold.violation(inv, example)
    assert record["step"] == step == over[0]["step"] and record["api"] == API
    first = over[0]
    limit = first.get("max_new_tokens", first.get("max_length"))
    assert record["message"].startswith(inv.description + ": ")
    assert f"= {limit} at step {step}" in record["message"]


@pytest.mark.slow
def test_plain_training_yields_no_incidental_bounds(runs):
    invariants = _infer(runs["mlp"][0])
    for inv in invariants:
        print(inv.id, inv.description, inv.support)
    assert invariants == []
    # Together with the generate references, only the generate limits come out.
    combined = _infer(runs["mlp"][0], runs["reference"][0], runs["reference2"][0])
    assert {_key(inv) for inv in combined} == {GROWTH, LENGTH}


def _example(value: int, bound: int, batch: int = 1, step: int = 0, **flags: bool) -> CallExample:
    return CallExample(
        api="sample", step=step, trace="t.jsonl",
        properties=(("ret", value), ("ret.shape[0]", batch)),
        bounds=(("vocab_size", bound),),
        inputs=(("logits.shape[0]", batch),),
        features=tuple(sorted({"phase": "eval", **{f"arg.{k}": v for k, v in flags.items()}}.items())),
    )


def test_a_strict_bound_is_found_for_integers():
    # A sampled index is below the vocabulary size, and reaches vocab_size - 1 at two sizes.
    group = [_example(v, b) for v, b in [(3, 4), (2, 4), (7, 8), (5, 8), (0, 16), (15, 16)]]
    (inv,) = threshold.infer({"sample": group}, ("t.jsonl",))
    assert _key(inv) == ("ret", "<", "vocab_size") and inv.support["attained"] == 3
    assert stream.check(threshold, inv, {"sample": [_example(8, 8, step=5)]})[0].step == 5


def test_a_bound_never_reached_is_not_emitted():
    # ret and the batch size stay below vocab_size, but never get near it: no evidence.
    group = [_example(v, b, batch=n) for v, b, n in [(1, 4, 1), (2, 8, 2), (0, 16, 3), (1, 4, 2), (5, 8, 1),
                                                     (9, 16, 3)]]
    assert threshold.infer({"sample": group}, ()) == []


def test_a_property_copied_from_an_input_dim_is_not_bounded():
    # The batch size reaches vocab_size at 4 and 8, but it is the input's batch size: without the
    # guard, ret.shape[0] <= vocab_size would be emitted next to the real bound on ret.
    group = [_example(v, b, batch=n) for v, b, n in [(3, 4, 4), (7, 8, 8), (2, 8, 1), (15, 16, 2), (1, 16, 3)]]
    assert {_key(inv) for inv in threshold.infer({"sample": group}, ())} == {("ret", "<", "vocab_size")}


def test_a_precondition_separates_the_calls_that_ignore_the_bound():
    group = [_example(v, b, clamp=True) for v, b in [(4, 4), (8, 8), (3, 16), (16, 16), (2, 8)]]
    group += [_example(20, 4, clamp=False), _example(9, 8, clamp=False)]
    (inv,) = threshold.infer({"sample": group}, ())
    assert [c.text() for c in inv.precondition] == ["arg.clamp = True"]
    assert inv.description.endswith("<= its argument vocab_size, when arg.clamp = True")
    assert stream.check(threshold, inv, {"sample": group}) == []
