"""One fault reads as one group: grouping by invariant family, name patterns inside a group, the
group's sentence and its "N of M", from hand-made records and from a real training run with a
forgotten zero_grad checked online."""

from __future__ import annotations

import json

from conftest import MLP, run_script

from traincheck_agent.inference.coverage import Coverage
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import write_invariants
from traincheck_agent.inference.judged_counts import MAX_KEYS, JudgedCounts
from traincheck_agent.report.html import header_tiles, read_violations, render_report
from traincheck_agent.report.name_patterns import common_scope, name_patterns
from traincheck_agent.report.triage import judged_counts, triage
from traincheck_agent.report.violations import violation_record

STALE = {"event": "backward", "attribute": "grad", "effect": "finds_none_or_zero"}
CNN_PARAMETERS = [f"model.{layer}.{leaf}" for layer in ("conv1", "conv2", "bn1", "bn2", "fc1", "fc2")
                  for leaf in ("weight", "bias")]


def _stale(step: int, variable: str, rank: int = 0, trace: str = "online") -> dict:
    violation = {"invariant": "st-stale", "relation": "StateTransition", "step": step, "variable": variable,
                 "trace": trace,
                 "message": f"backward finds the grad None or zero when it starts, for every variable it touches, "
                            f"when first_in_step = True: violated by {variable} at step {step}"}
    record = violation_record(violation, None, rank=rank, run_id="r", host="h", timestamp_ns=1)
    record["evidence"].update(subject=STALE, support={"passing": 500, "variables": 10},
                              precondition=["first_in_step = True"],
                              expected="backward finds the grad None or zero when it starts, for every variable "
                                       "it touches, when first_in_step = True")
    return record


def test_one_fault_on_forty_parameters_across_layer_types_is_one_group():
    names = [f"model.{kind}{i}.{leaf}" for kind in ("bn", "conv", "fc") for i in range(1, 8)
             for leaf in ("weight", "bias")][:40]
    groups = triage([_stale(1, name) for name in names])
    assert len(groups) == 1
    [group] = groups
    assert group.count == 40 and group.first_step == 1
    # The patterns are inside the group, with counts, and cover every name.
    assert sum(n for _, n in group.patterns) == 40
    assert {p for p, _ in group.patterns} == {"model.bn*.{bias,weight}", "model.conv*.{bias,weight}",
                                              "model.fc*.{bias,weight}"}
    assert group.sentence == ("backward found grads left over from an earlier step on 40 parameters of `model` "
                              "at step 1")  # no judged count: no "of"
    assert group.hint.startswith("grads were not cleared before backward")


def test_a_lone_numbered_name_keeps_its_number():
    [group] = triage([_stale(3, "h.1")])
    assert group.patterns == [("h.1", 1)] and group.pattern == "h.1"
    assert "on `h.1` at step 3" in group.sentence and "h.*" not in group.sentence
    # Numbers are generalised only where numbered siblings are there.
    assert name_patterns(["h.1", "h.2", "g.1"]) == [("h.*", 2), ("g.1", 1)]
    assert name_patterns(["model.bn1.weight", "model.bn1.bias"]) == [("model.bn1.{bias,weight}", 2)]
    assert common_scope(["model.a.w", "model.b.w"]) == "model" and common_scope(["a", "b"]) == ""


def test_n_of_m_only_from_a_judged_count_that_covers_the_broken_ones():
    records = [_stale(1, name) for name in CNN_PARAMETERS[:10]] + [_stale(2, name) for name in CNN_PARAMETERS[:10]]
    stats = [{"event": "coverage", "rank": 0, "coverage": {"judged": {"st-stale": {"online": {"1": 12}}}}}]
    [group] = triage(records, judged=judged_counts(stats))
    assert group.of_total == 12
    assert group.sentence == ("backward found grads left over from an earlier step on 10 of 12 parameters of "
                              "`model` at step 1, again up to step 2")
    # Another rank's count is not this rank's; a count smaller than what broke is not believed.
    other_rank = [{**stats[0], "rank": 1}]
    assert triage(records, judged=judged_counts(other_rank))[0].of_total is None
    too_few = [{"event": "coverage", "rank": 0, "coverage": {"judged": {"st-stale": {"online": {"1": 4}}}}}]
    [group] = triage(records, judged=judged_counts(too_few))
    assert group.of_total is None and "on 10 parameters of `model` at steps 1-2" in group.sentence


def test_judged_counts_keep_broken_steps_and_stay_bounded():
    counts = JudgedCounts()
    for step in range(MAX_KEYS + 100):
        counts.judged(("inv", "t", step))
        if step == 3:
            counts.violated(("inv", "t", 3))
    assert counts.to_json() == {"inv": {"t": {"3": 1}}}
    assert len(counts.counts) <= MAX_KEYS
    counts.judged(("inv", "t", 1))  # a step already settled and dropped: not counted again
    assert ("inv", "t", 1) not in counts.counts


def test_report_header_counts_one_rank_and_pluralises():
    records = [_stale(1, "model.fc.weight")]
    groups = triage(records)
    tiles = dict((label, value) for value, label in header_tiles(records, groups, not_covered=3))
    assert tiles["violation"] == "1" and tiles["group"] == "1" and tiles["invariant"] == "1"
    assert tiles["rank (0)"] == "1"
    assert tiles["not covered (outside the references' domain)"] == "3"
    assert "waived" not in tiles
    two = [_stale(1, "model.fc.weight", rank=0), _stale(1, "model.fc.weight", rank=1)]
    tiles = dict((label, value) for value, label in header_tiles(two, triage(two), waived=2))
    assert tiles["ranks (0-1)"] == "2" and tiles["violations"] == "2" and tiles["waived"] == "2"
    page = render_report(records, "src", groups=groups, not_covered=0)
    assert "<b>1</b>violation<" in page and "<b>1</b>rank (0)<" in page and "<b>0</b>ranks" not in page
    assert '<p class="hint"><b>hint:</b> grads were not cleared before backward' in page


def test_a_forgotten_zero_grad_checked_online_is_one_group_with_its_hint(agent_in_process, tmp_path, capsys):
    """A real CPU run: references collected and learned in this process, then the MLP pipeline
    without zero_grad under check mode."""
    reference = tmp_path / "reference"
    agent = agent_in_process("collect", out_dir=reference)
    run_script(MLP, "--steps", "6")
    agent.stop()
    invariants, files = infer_invariants([reference])
    inv_file = tmp_path / "inv.json"
    write_invariants(invariants, inv_file, [str(f) for f in files])

    out = tmp_path / "check"
    agent = agent_in_process("check", out_dir=out, TRAINCHECK_INV=str(inv_file))
    run_script(MLP, "--steps", "4", "--bug", "no-zero-grad")
    agent.stop()
    stats: list[dict] = []
    records, _ = read_violations(out, stats)
    groups = triage(records, judged=judged_counts(stats))
    top = groups[0]
    assert top.relation == "StateTransition" and top.subject == "backward" and top.first_step == 1
    parameters = {r["variable"] for r in records if r["invariant"] in top.invariants and r["step"] == 1}
    assert len(parameters) == 6
    # Every parameter the invariant judged at step 1 broke, and the sentence says so.
    assert top.of_total == 6
    assert top.sentence.startswith("backward found grads left over from an earlier step on 6 of 6 parameters "
                                   "of `model` at step 1")
    assert top.hint == "grads were not cleared before backward: is `optimizer.zero_grad()` called every step?"
    # The missing call seen by the call-order invariant is the same cause: shown with the top group.
    # So are the stale grads the steps then applied (GradCleared, a step later in each iteration).
    sequence = [g for g in groups if g.relation == "APISequence"]
    cleared = [g for g in groups if g.relation == "GradCleared"]
    assert sequence and all(g.same_cause_as == 1 for g in sequence)
    assert cleared and all(g.same_cause_as == 1 for g in cleared)
    assert [g for g in groups if g.same_cause_as is None] == [top]
    err = capsys.readouterr().err
    first = next(line for line in err.splitlines() if line.startswith("[traincheck] violation at rank 0 step 1: "))
    assert first.startswith("[traincheck] violation at rank 0 step 1: backward found grads left over")
    assert "first_in_step" not in first
    summary = next(line for line in err.splitlines() if "check summary" in line)
    assert f"likely cause first (1 group): {top.sentence} (hint: {top.hint})" in summary
    [coverage] = [json.loads(line) for line in (out / "violations-0.jsonl").read_text().splitlines()
                  if json.loads(line).get("event") == "coverage"]
    assert coverage["coverage"]["judged"][top.invariants[0]]["online"]["1"] == 6
    # The report reads as one group too: the call-order group sits inside the top group's card.
    page = render_report(records, str(out), groups=groups)
    assert page.count('<article class="card') == 1
    assert page.count('<div class="also">') == len(sequence) + len(cleared)
    assert "<b>1</b>group<" in page


def test_the_coverage_of_a_check_counts_what_each_invariant_judged_where_it_broke():
    coverage = Coverage()
    coverage.judged.judged(("a", "t", 1))
    coverage.judged.judged(("a", "t", 1))
    coverage.judged.violated(("a", "t", 1))
    coverage.judged.judged(("a", "t", 2))
    merged = Coverage()
    merged.merge(coverage.to_json())
    merged.merge(coverage.to_json())
    assert merged.to_json()["judged"] == {"a": {"t": {"1": 4}}}


def test_the_coverage_summary_says_each_reason_once():
    """Several invariants of one call share a reason (every zero_grad invariant meets the same
    frozen parameters): the summary says it once, and counts further distinct reasons as more."""
    from traincheck_agent.inference.invariant import Invariant

    invariants = {inv.id: inv for inv in (
        Invariant("StateTransition", {"event": "zero_grad", "attribute": "grad", "effect": effect}, ())
        for effect in ("changed", "becomes_none_or_zero"))}
    coverage = Coverage()
    for inv_id in invariants:
        coverage.outside[inv_id] = 12
        coverage.reasons[inv_id] = "requires_grad=False never seen"
    coverage.checked["other"] = 30
    assert coverage.summary(invariants) == ("30 of 54 examples checked, 24 outside the references' domain "
                                            "(requires_grad=False never seen for zero_grad)")
    coverage.outside["x"], coverage.reasons["x"] = 1, "dtype=bfloat16 never seen"
    coverage.outside["y"], coverage.reasons["y"] = 1, "phase=eval never seen"
    assert coverage.summary(invariants).endswith(
        "(requires_grad=False never seen for zero_grad; dtype=bfloat16 never seen for x, ...)")


def test_a_damaged_judged_count_is_refused_with_a_reason():
    from traincheck_agent.report.violation_schema import record_problem

    good = {"event": "coverage", "coverage": {"judged": {"st-1": {"online": {"1": 6}}}}}
    assert record_problem(good) == ""
    bad = {"event": "coverage", "coverage": {"judged": {"st-1": {"online": {"1": "six"}}}}}
    assert record_problem(bad) == "`coverage.judged` holds a value that is not an object of integers"
    assert record_problem({"event": "coverage", "coverage": {"judged": [1]}}) == \
        "`coverage.judged` is not an object of objects"
