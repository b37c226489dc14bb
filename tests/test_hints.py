"""The hint table and the stderr line: hints are data, found by relation, API and what the
invariant claims; the line a person reads starts with what happened, not with the precondition."""

from __future__ import annotations

from traincheck_agent.inference import relations
from traincheck_agent.report.hints import HINTS, Hint, find_hint, hint_for_record, what_of
from traincheck_agent.report.sentences import plural, without_condition
from traincheck_agent.report.violations import format_line, violation_record


def test_every_entry_names_a_relation_and_reads_as_a_question():
    assert 8 <= len(HINTS) <= 20
    for entry in HINTS:
        assert entry.relation in relations.MODULES, entry
        assert entry.hint.endswith("?") and entry.happened and entry.cause


def test_lookup_by_relation_api_and_what():
    stale = find_hint("StateTransition", "backward", what_of(
        {"event": "backward", "attribute": "grad", "effect": "finds_none_or_zero"}))
    assert stale is not None and "optimizer.zero_grad()" in stale.hint
    not_applied = find_hint("GradApplied", "optimizer.step", "data:applies_every_grad")
    assert not_applied is not None and "in the optimizer" in not_applied.hint
    replicas = find_hint("CrossRankConsistent", "after:optimizer.step", "data")
    assert replicas is not None and "DDP's hooks" in replicas.hint
    assert find_hint("APISequence", "torch.optim.Optimizer.zero_grad", "covers") is not None


def test_no_hint_when_the_cause_is_unclear():
    assert find_hint("EventContain", "torch.nn.Linear.forward", "") is None
    assert find_hint("StateTransition", "backward", "data:changed") is None
    assert find_hint("NoSuchRelation", "backward", "grad:finds_none_or_zero") is None
    assert hint_for_record({"relation": "Threshold", "evidence": {"subject": {"api": "x"}}}) is None
    assert hint_for_record({}) is None


def test_the_first_match_wins_so_a_table_can_order_specific_before_general():
    table = (Hint("R", "a.*", "x", "specific", "s?", "one"), Hint("R", "*", "*", "general", "g?", "two"))
    assert find_hint("R", "a.b", "x", table).happened == "specific"  # type: ignore[union-attr]
    assert find_hint("R", "c", "x", table).happened == "general"  # type: ignore[union-attr]


def _record(subject: dict, **violation) -> dict:
    base = {"invariant": "st-0123456789ab", "relation": "StateTransition", "step": 3,
            "variable": "model.fc.weight", "trace": "online",
            "message": "backward finds the grad None or zero when it starts, for every variable it touches, "
                       "when first_in_step = True: violated by model.fc.weight at step 3 (grad: nonzero -> nonzero)"}
    record = violation_record({**base, **violation}, None, rank=1, run_id="r", host="h", timestamp_ns=1)
    record["evidence"].update(subject=subject, precondition=["first_in_step = True"],
                              expected="backward finds the grad None or zero when it starts, for every variable "
                                       "it touches, when first_in_step = True")
    return record


def test_format_line_leads_with_what_happened_and_leaves_the_precondition_to_the_record():
    record = _record({"event": "backward", "attribute": "grad", "effect": "finds_none_or_zero"})
    line = format_line(record)
    assert line == ("[traincheck] violation at rank 1 step 3: backward found grads left over from an earlier step "
                    "on model.fc.weight; expected backward finds the grad None or zero when it starts, for every "
                    "variable it touches; invariant st-0123456789ab (StateTransition)")
    assert "first_in_step" not in line
    assert record["evidence"]["precondition"] == ["first_in_step = True"]  # the record keeps it


def test_a_line_without_a_hint_keeps_the_relations_words_and_names_its_subject():
    record = _record({"event": "optimizer.step", "attribute": "grad", "effect": "unchanged"},
                     message="backward finds the grad None or zero when it starts, for every variable it touches, "
                             "when first_in_step = True: it ran with autocast off at step 3",
                     api="torch.nn.Linear.forward", variable="")
    line = format_line(record)
    assert line.startswith("[traincheck] violation at rank 1 step 3: it ran with autocast off at step 3 "
                           "(torch.nn.Linear.forward); ")
    assert line.endswith("; invariant st-0123456789ab (StateTransition)")


def test_the_record_carries_the_sentence_and_hint_as_added_fields():
    violation = {"invariant": "ga-1", "relation": "GradApplied", "step": 0, "variable": "model.head.weight",
                 "message": "m", "trace": "t"}
    record = violation_record(violation, None, rank=0, run_id=None)
    assert record["sentence"] == "m (model.head.weight)" and "hint" not in record  # no subject: no hint
    for key in ("timestamp", "severity", "rank", "step", "invariant", "relation", "message", "evidence", "body"):
        assert key in record


def test_plural_and_condition_text():
    assert [plural(n, "group") for n in (0, 1, 2)] == ["0 groups", "1 group", "2 groups"]
    assert plural(1, "violation") == "1 violation"
    assert without_condition("a, when b = 1 and c = 2", ["b = 1", "c = 2"]) == "a"
    assert without_condition("a, when b = 1", []) == "a, when b = 1"
