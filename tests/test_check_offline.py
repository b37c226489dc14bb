"""`traincheck check` on traces collected from real CPU training: violation records and their
schema, the stderr lines and their rate limit, triage of the root cause, exit statuses; and the
violation log and triage on their own."""

from __future__ import annotations

import io
import json
import random
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from conftest import collect_mlp_here

from traincheck_agent.inference.invariant import read_invariants
from traincheck_agent.report.triage import triage, variable_pattern
from traincheck_agent.report.violations import ViolationLog, format_line, violation_record

REQUIRED = ("timestamp", "severity", "rank", "step", "invariant", "relation", "message", "evidence")
OTEL = ("time_unix_nano", "severity_text", "severity_number", "body", "attributes", "resource")


def traincheck(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traincheck_agent", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("check_runs")
    runs = {
        "reference": collect_mlp_here(root, "reference", "--steps", "10"),
        "frozen_reference": collect_mlp_here(root, "frozen_reference", "--steps", "8", "--freeze-backbone"),
        "clean": collect_mlp_here(root, "clean", "--steps", "5", "--optimizer", "sgd", "--seed", "3",
                          "--lr", "0.005"),
        "bug_frozen": collect_mlp_here(root, "bug_frozen", "--steps", "3", "--bug", "optimizer-over-frozen"),
        "bug_no_zero_grad": collect_mlp_here(root, "bug_no_zero_grad", "--steps", "3", "--bug", "no-zero-grad"),
    }
    inv = root / "inv.json"
    proc = traincheck("infer", runs["reference"], runs["frozen_reference"], "-o", inv)
    assert proc.returncode == 0, proc.stderr
    runs["inv"] = inv
    return runs


def _lines(out: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(out.glob("violations-*.jsonl"))
            for line in path.read_text().splitlines()]


def _records(out: Path) -> list[dict]:
    """The violation records (the stats record of what was not covered left out)."""
    return [r for r in _lines(out) if r.get("event") != "coverage"]


@pytest.fixture(scope="module")
def frozen_check(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("frozen_check") / "out"
    proc = traincheck("check", runs["bug_frozen"], "-i", runs["inv"], "--out", out)
    return proc, out


@pytest.mark.slow
def test_optimizer_over_frozen_parameters_exits_1_with_records(frozen_check):
    proc, out = frozen_check
    assert proc.returncode == 1, proc.stderr
    assert [p.name for p in out.iterdir()] == ["violations-0.jsonl"]
    records = _records(out)
    assert records
    for record in records:
        assert all(key in record for key in REQUIRED + OTEL), sorted(record)
        assert record.get("api") or record.get("variable")
        assert record["severity"] == record["severity_text"] == "ERROR"
        assert record["severity_number"] == 17
        assert record["body"] == record["message"]
        assert record["rank"] == 0 and isinstance(record["step"], int)
        assert datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00")).tzinfo is not None
        assert isinstance(record["time_unix_nano"], int)
        attributes = record["attributes"]
        assert attributes["traincheck.invariant"] == record["invariant"]
        assert attributes["traincheck.relation"] == record["relation"]
        assert attributes["traincheck.step"] == record["step"]
        assert attributes["service.name"] == record["resource"]["service.name"] == "traincheck"
        assert "host.name" in attributes and isinstance(attributes["process.pid"], int)
        assert record["evidence"]["expected"] and record["evidence"]["support"]["passing"] > 0
        assert record["evidence"]["trace"].startswith("trace_")
        assert record["message"].startswith(record["evidence"]["expected"])
    # The traced process's pid, not the checker's.
    assert records[0]["resource"]["process.pid"] == int(re.search(r"_pid(\d+)", records[0]["evidence"]["trace"])[1])


@pytest.mark.slow
def test_optimizer_over_frozen_parameters_top_group_is_the_cause(frozen_check, runs):
    proc, out = frozen_check
    invariants = {i.id: i for i in read_invariants(runs["inv"])}
    groups = triage(_records(out), invariants)
    top = groups[0]
    assert top.relation == "GradApplied" and top.subject == "optimizer.step"
    assert "is changed by an optimizer step" in top.expected
    assert top.first_step == 0 and top.ranks == [0]
    assert top.pattern == "model.head.{bias,weight}"
    assert top.variables == ["model.head.bias", "model.head.weight"]
    assert top.rank_reason.startswith("ranked first")
    assert top.hint.startswith("are they in the optimizer")
    # The summary on stdout shows the same group first, as one sentence with its hint.
    lines = proc.stdout.splitlines()
    first = lines.index("groups, likely root cause first:") + 1
    assert re.match(r"  1\. parameters with a grad were never changed by an optimizer step on 2 of \d+ parameters "
                    r"of `model\.head` at step 0, again up to step 2$", lines[first]), lines[first]
    assert lines[first + 1] == f"     hint: {top.hint}"


@pytest.mark.slow
def test_examples_outside_the_references_domain_are_counted_not_judged(frozen_check):
    """The frozen backbone's parameters are in the buggy optimizer, so zero_grad sees
    requires_grad=False, which no reference showed it: counted in a stats record and in the
    output, never a violation."""
    proc, out = frozen_check
    stats = [r for r in _lines(out) if r.get("event") == "coverage"]
    assert len(stats) == 1
    record = stats[0]
    assert record["severity_text"] == "INFO" and record["body"] == record["message"]
    assert "outside the references' domain (requires_grad=False never seen for zero_grad)" in record["body"]
    outside = record["attributes"]["traincheck.examples_not_covered"]
    assert outside == sum(record["coverage"]["outside"].values()) > 0
    assert record["attributes"]["traincheck.examples_checked"] == sum(record["coverage"]["checked"].values())
    assert record["body"] in proc.stdout
    assert not [r for r in _records(out) if "zero_grad" in r["message"] and r["variable"].startswith("model.backbone")]


@pytest.mark.slow
def test_stderr_is_rate_limited_and_the_jsonl_keeps_everything(frozen_check):
    proc, out = frozen_check
    records = _records(out)
    per_invariant: dict[str, int] = {}
    for record in records:
        per_invariant[record["invariant"]] = per_invariant.get(record["invariant"], 0) + 1
    busy = [inv for inv, n in per_invariant.items() if n > 3]
    assert busy  # 2 head parameters x 3 steps
    stderr = proc.stderr.splitlines()
    for inv, n in per_invariant.items():
        shown = [line for line in stderr if line.startswith("[traincheck] violation at ") and f"invariant {inv} " in line]
        assert len(shown) == min(n, 3)
        summary = [line for line in stderr if re.search(f"more violations? of {inv} not shown", line)]
        if n > 3:
            hidden = f"{n - 3} more violation" + ("" if n - 3 == 1 else "s")
            assert summary == [f"[traincheck] {hidden} of {inv} not shown (all in {out / 'violations-0.jsonl'})"]
        else:
            assert summary == []
    line = next(line for line in stderr if line.startswith("[traincheck] violation"))
    assert re.match(r"\[traincheck\] violation at rank 0 step 0: parameters with a grad were never changed by an "
                    r"optimizer step on model\.head\.\w+; expected every parameter that backward gives a "
                    r"non-zero grad is changed by an optimizer step[^;]*; "
                    r"invariant ga-[0-9a-f]{12} \(GradApplied\)$", line), line


@pytest.mark.slow
def test_forgotten_zero_grad_top_group_is_about_grads_at_step_1(runs, tmp_path):
    proc = traincheck("check", runs["bug_no_zero_grad"], "-i", runs["inv"], "--out", tmp_path / "out")
    assert proc.returncode == 1, proc.stderr
    groups = triage(_records(tmp_path / "out"))
    top = groups[0]
    assert top.first_step == 1
    assert top.relation in ("StateTransition", "APISequence")
    assert "zero_grad" in top.subject or "grad" in top.expected
    # At the same step, the state invariant outranks the ordering one.
    kinds = [g.kind for g in groups if g.first_step == 1]
    assert kinds == sorted(kinds, key=["state", "ordering", "other"].index)
    assert any(g.relation == "APISequence" and g.apis == ["torch.optim.Optimizer.zero_grad"] for g in groups)


@pytest.mark.slow
def test_clean_run_exits_0(runs, tmp_path):
    proc = traincheck("check", runs["clean"], "-i", runs["inv"], "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no violations" in proc.stdout
    assert proc.stderr == ""
    assert list((tmp_path / "out").glob("violations-*.jsonl")) == []


@pytest.mark.slow
def test_rerun_replaces_the_violations_files(runs, tmp_path):
    out = tmp_path / "out"
    first = traincheck("check", runs["bug_frozen"], "-i", runs["inv"], "--out", out)
    count = len(_records(out))
    (out / "keep.txt").write_text("mine")
    second = traincheck("check", runs["bug_frozen"], "-i", runs["inv"], "-i", runs["inv"], "--out", out)
    assert first.returncode == second.returncode == 1
    assert len(_records(out)) == count  # replaced, not appended; an invariant given twice is checked once
    assert (out / "keep.txt").read_text() == "mine"


@pytest.mark.slow
def test_default_out_directory(runs, tmp_path):
    proc = traincheck("check", runs["bug_frozen"], "-i", runs["inv"], cwd=tmp_path)
    assert proc.returncode == 1
    assert (tmp_path / "traincheck_check" / "violations-0.jsonl").is_file()


@pytest.mark.slow
@pytest.mark.parametrize(("content", "problem"), [
    ("{not json", "line 1: not valid JSON"),
    ('{"format": "traincheck-invariants", "version": 1, "invariants": [3]}', "invariants[0]: expected an object"),
])
def test_malformed_invariants_file_exits_2_naming_it(runs, tmp_path, content, problem):
    bad = tmp_path / "broken_inv.json"
    bad.write_text(content)
    proc = traincheck("check", runs["clean"], "-i", runs["inv"], "-i", bad, "--out", tmp_path / "out")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"traincheck: error: {bad}: ") and problem in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_bad_traces_exit_2_naming_the_file(runs, tmp_path):
    missing = traincheck("check", tmp_path / "nope", "-i", runs["inv"], "--out", tmp_path / "o")
    assert missing.returncode == 2 and str(tmp_path / "nope") in missing.stderr
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    nothing = traincheck("check", empty_dir, "-i", runs["inv"], "--out", tmp_path / "o")
    assert nothing.returncode == 2 and "no trace files" in nothing.stderr
    garbage = tmp_path / "trace_x_rank0_pid1.jsonl"
    garbage.write_text('{"kind": "call"}\n{"kind": "call"}\n')
    damaged = traincheck("check", garbage, "-i", runs["inv"], "--out", tmp_path / "o")
    assert damaged.returncode == 2 and f"{garbage}:1: first record is not a header" in damaged.stderr
    no_inv = traincheck("check", runs["clean"], "-i", tmp_path / "absent.json", "--out", tmp_path / "o")
    assert no_inv.returncode == 2 and f"{tmp_path / 'absent.json'}: cannot be read" in no_inv.stderr
    assert "Traceback" not in damaged.stderr + missing.stderr + nothing.stderr + no_inv.stderr


@pytest.mark.slow
def test_a_trace_with_no_complete_line_is_skipped(runs, tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    for path in runs["bug_frozen"].glob("trace_*.jsonl"):
        (traces / path.name).write_bytes(path.read_bytes())
    (traces / "trace_killed_rank1_pid9.jsonl").write_bytes(b'{"kind": "hea')
    proc = traincheck("check", traces, "-i", runs["inv"], "--out", tmp_path / "out")
    assert proc.returncode == 1, proc.stderr
    assert "trace_killed_rank1_pid9.jsonl:1: torn header line: no complete record; file skipped" in proc.stderr


# The violation log and triage on their own, with records made by violation_record.

def _record(step: int, invariant: str = "st-000000000001", relation: str = "StateTransition",
            variable: str = "model.layers.0.weight", support: int = 10, rank: int = 0,
            api: str = "") -> dict:
    violation = {"invariant": invariant, "relation": relation, "step": step, "variable": variable,
                 "api": api, "message": f"something broke at step {step}", "trace": "t.jsonl"}
    record = violation_record(violation, None, rank=rank, run_id="r1", host="h", timestamp_ns=1_700_000_000_000_000_000)
    record["evidence"]["support"] = {"passing": support}
    record["evidence"]["subject"] = {"event": "optimizer.step"} if relation == "StateTransition" else {"api": api}
    return record


def test_violation_record_fields():
    record = _record(4)
    assert record["timestamp"] == "2023-11-14T22:13:20.000000Z"
    assert record["time_unix_nano"] == 1_700_000_000_000_000_000
    assert "api" not in record and record["variable"] == "model.layers.0.weight"
    assert record["evidence"]["trace"] == "t.jsonl"
    assert record["resource"]["host.name"] == "h"
    warn = violation_record({"invariant": "x", "relation": "R", "step": 0, "message": "m"}, None,
                            rank=1, run_id=None, severity="WARN")
    assert (warn["severity_text"], warn["severity_number"]) == ("WARN", 13)
    json.dumps(record)  # JSON-able
    with pytest.raises(ValueError, match="unknown severity"):
        violation_record({}, None, rank=0, run_id=None, severity="LOUD")


def test_format_line_is_one_line():
    record = _record(2)
    record["message"] = "expected thing: it\nbroke"
    line = format_line(record)
    assert "\n" not in line and line.startswith("[traincheck] violation at rank 0 step 2: ")
    assert line.endswith("invariant st-000000000001 (StateTransition)")


def test_violation_log_survives_an_unwritable_directory(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    stream = io.StringIO()
    log = ViolationLog(blocker / "out", rank=3, stream=stream, stderr_limit=2)
    for step in range(5):
        log.report(_record(step))
    assert log.close() == {"st-000000000001": 5}
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3 and lines[-1] == "[traincheck] 3 more violations of st-000000000001 not shown"
    warnings = [line for line in capsys.readouterr().err.splitlines() if "cannot write violations" in line]
    assert len(warnings) == 1


def test_violation_log_appends_and_flushes_each_line(tmp_path):
    stream = io.StringIO()
    log = ViolationLog(tmp_path / "deep" / "out", rank=1, stream=stream)
    log.report(_record(0))
    path = tmp_path / "deep" / "out" / "violations-1.jsonl"
    assert len(path.read_text().splitlines()) == 1  # on disk before close
    log.close()
    again = ViolationLog(tmp_path / "deep" / "out", rank=1, stream=stream)
    again.report(_record(1))
    again.close()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [0, 1]


def test_variable_pattern():
    assert variable_pattern("model.layers.3.weight") == "model.layers.*.weight"
    assert variable_pattern("model.h.11.attn.c_attn.bias") == "model.h.*.attn.c_attn.bias"


def test_triage_ranks_earliest_then_state_then_support_deterministically():
    records = (
        [_record(s, "as-1", "APISequence", variable="", api="torch.optim.Optimizer.zero_grad", support=1000)
         for s in (1, 2, 3)]
        + [_record(s, "st-weak", variable=f"model.layers.{i}.bias", support=5) for s in (1, 2) for i in (0, 1)]
        + [_record(s, "st-strong", variable=f"model.layers.{i}.weight", support=50) for s in (1, 2) for i in (0, 1)]
        + [_record(s, "st-late", variable="model.head.weight", support=999) for s in (2, 3)]
        + [_record(s, "st-late", variable="model.head.weight", support=999) for s in (400, 401)]
    )
    shuffled = records[:]
    random.Random(7).shuffle(shuffled)
    groups = triage(shuffled)
    assert [g.to_json() for g in groups] == [g.to_json() for g in triage(records)]
    # st-weak, st-strong and st-late are one family (StateTransition of optimizer.step) in one
    # step window: one group, whatever the variables; their names are patterns inside it.
    first = groups[0]
    assert first.relation == "StateTransition" and first.subject == "optimizer.step"
    assert first.patterns == [("model.layers.*.{bias,weight}", 4), ("model.head.weight", 1)]
    assert first.invariants == ["st-late", "st-strong", "st-weak"] and first.count == 10 and first.support == 999
    assert [g.relation for g in groups[:2]] == ["StateTransition", "APISequence"]  # state first at step 1
    # 400 is far from 3: a new window, a new group.
    assert groups[2].variables == ["model.head.weight"] and (groups[2].first_step, groups[2].last_step) == (400, 401)
    assert len(groups) == 3


def test_triage_puts_what_was_seen_before_a_call_ahead_of_what_was_seen_after_it():
    """Grads clipped on one rank only: at the same step, with the same support, the grads that
    differ before ``optimizer.step`` are the cause, the data that differs after it the effect
    (sorting the points by name would put ``after:`` first)."""
    def drift(point: str, attribute: str) -> dict:
        record = _record(2, f"cr-{attribute}-{point}", "CrossRankConsistent", variable="fc.weight", support=24)
        record["evidence"]["subject"] = {"event": point, "attribute": attribute}
        return record

    groups = triage([drift("after:optimizer.step", "data"), drift("before:optimizer.step", "grad")])
    assert [g.subject for g in groups] == ["before:optimizer.step", "after:optimizer.step"]


def test_triage_deduplicates_and_keeps_sampled_steps_together():
    twice = [_record(0), _record(0)]
    assert triage(twice)[0].count == 1
    sampled = [_record(s) for s in range(0, 1000, 100)]  # state sampled every 100 steps
    assert len(triage(sampled)) == 1
