"""Waivers (docs/waivers.md): the file's validation, what a waiver matches, `traincheck
invariants waive` appending to the user's file, and waived violations in a real online check of
a buggy MLP run, in `traincheck check --waive` and in the report. All in the pytest process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import MLP, agent_active, collect_in_process, run_script

from traincheck_agent.check.waivers import Waiver, WaiverFileError, read_waivers
from traincheck_agent.cli import main
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import read_invariants, write_invariants
from traincheck_agent.report.violation_schema import record_problem
from traincheck_agent.settings import Settings

# ------------------------------------------------------------------------------ the file

GOOD = """\
# reviewed like code
version: 1
waivers:
  - id: sc-0123456789ab
    reason: the head is re-initialised on purpose
  - relation: APISequence
    api: "torch.optim.*"
    steps: 100-200
    reason: a scheduler quirk
  - relation: StateTransition
    variable: "*.bias"
    steps: {from: 3}
    reason: biases frozen late
"""

BAD_FILES = {
    "not-yaml": ("version: 1\nwaivers: [", "", "not valid YAML"),
    "empty": ("", "", "empty"),
    "top-list": ("- id: sc-0123456789ab\n", "", "expected a mapping at the top"),
    "unknown-top-key": ("version: 1\nwaiver: []\n", "waiver", "unknown key"),
    "no-version": ("waivers: []\n", "version", "unsupported version None"),
    "version-2": ("version: 2\nwaivers: []\n", "version", "unsupported version 2"),
    "version-string": ("version: '1'\nwaivers: []\n", "version", "unsupported version '1'"),
    "waivers-mapping": ("version: 1\nwaivers: {id: x}\n", "waivers", "expected a list"),
    "entry-string": ("version: 1\nwaivers:\n  - sc-0123456789ab\n", "waivers[0]", "expected a mapping"),
    "unknown-key": ("version: 1\nwaivers:\n  - id: sc-0123456789ab\n    reason: r\n    rank: 3\n",
                    "waivers[0].rank", "unknown key"),
    "missing-reason": ("version: 1\nwaivers:\n  - id: sc-0123456789ab\n", "waivers[0]", "missing reason"),
    "blank-reason": ("version: 1\nwaivers:\n  - id: sc-0123456789ab\n    reason: '  '\n",
                     "waivers[0].reason", "non-empty string"),
    "bad-id": ("version: 1\nwaivers:\n  - id: optimizer.step\n    reason: r\n", "waivers[0].id",
               "not an invariant id"),
    "id-and-relation": ("version: 1\nwaivers:\n  - id: sc-0123456789ab\n    relation: APISequence\n"
                        "    api: '*'\n    reason: r\n", "waivers[0]", "either an id"),
    "nothing-waived": ("version: 1\nwaivers:\n  - reason: r\n", "waivers[0]", "say what is waived"),
    "unknown-relation": ("version: 1\nwaivers:\n  - relation: Nope\n    api: '*'\n    reason: r\n",
                         "waivers[0].relation", "unknown relation 'Nope'"),
    "relation-alone": ("version: 1\nwaivers:\n  - relation: APISequence\n    reason: r\n", "waivers[0]",
                       "needs an `api` and/or a `variable`"),
    "empty-pattern": ("version: 1\nwaivers:\n  - relation: APISequence\n    api: ''\n    reason: r\n",
                      "waivers[0].api", "non-empty glob"),
    "unclosed-set": ("version: 1\nwaivers:\n  - relation: APISequence\n    api: 'torch.[ab'\n    reason: r\n",
                     "waivers[0].api", "unclosed ["),
    "pattern-number": ("version: 1\nwaivers:\n  - relation: StateTransition\n    variable: 5\n    reason: r\n",
                       "waivers[0].variable", "non-empty glob"),
    "steps-words": ("version: 1\nwaivers:\n  - id: sc-0123456789ab\n    steps: early\n    reason: r\n",
                    "waivers[0].steps", "expected a range such as 100-200"),
    "steps-reversed": ("version: 1\nwaivers:\n  - id: sc-0123456789ab\n    steps: 200-100\n    reason: r\n",
                       "waivers[0].steps", "ends before it starts"),
    "steps-negative": ("version: 1\nwaivers:\n  - id: sc-0123456789ab\n    steps: -4\n    reason: r\n",
                       "waivers[0].steps", "0 or more"),
    "steps-key": ("version: 1\nwaivers:\n  - id: sc-0123456789ab\n    steps: {start: 3}\n    reason: r\n",
                  "waivers[0].steps.start", "unknown key"),
    "steps-float": ("version: 1\nwaivers:\n  - id: sc-0123456789ab\n    steps: {to: 2.5}\n    reason: r\n",
                    "waivers[0].steps.to", "expected a step"),
    "second-bad": (GOOD + "  - id: sc-0123456789ab\n", "waivers[3]", "missing reason"),
    "alias": ("version: 1\nwaivers:\n  - &w {id: sc-0123456789ab, reason: r}\n  - *w\n", "",
              "anchors and aliases"),
    "duplicate-key": ("version: 1\nversion: 1\nwaivers: []\n", "", "duplicate key"),
    "python-tag": ("version: 1\nwaivers: !!python/object/apply:os.system ['true']\n", "", "not valid YAML"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_waivers_file_gets_one_message_naming_file_waiver_and_problem(tmp_path, case):
    text, where, problem = BAD_FILES[case]
    path = tmp_path / "waivers.yaml"
    path.write_text(text)
    with pytest.raises(WaiverFileError) as raised:
        read_waivers(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: "), message
    assert raised.value.where == where, message
    assert problem in raised.value.problem, message


def test_unreadable_waivers_files_name_the_file(tmp_path):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"version: 1\n\xff\xfe")
    for path, problem in ((binary, "not UTF-8"), (tmp_path / "missing.yaml", "cannot be read"),
                          (tmp_path, "Is a directory")):
        with pytest.raises(WaiverFileError, match=problem) as raised:
            read_waivers(path)
        assert str(raised.value).startswith(str(path))


def test_a_good_file_reads_every_kind_of_waiver(tmp_path):
    path = tmp_path / "waivers.yaml"
    path.write_text(GOOD)
    waivers = read_waivers(path)
    assert waivers.entries == (
        Waiver(0, "the head is re-initialised on purpose", invariant="sc-0123456789ab"),
        Waiver(1, "a scheduler quirk", relation="APISequence", api="torch.optim.*", first_step=100, last_step=200),
        Waiver(2, "biases frozen late", relation="StateTransition", variable="*.bias", first_step=3),
    )
    (tmp_path / "none.yaml").write_text("version: 1\n")
    assert read_waivers(tmp_path / "none.yaml").entries == ()


# ------------------------------------------------------------------------------ matching


def test_a_waiver_matches_by_id_by_pattern_and_within_its_steps(tmp_path):
    path = tmp_path / "waivers.yaml"
    path.write_text(GOOD)
    waivers = read_waivers(path)
    by_id, by_api, by_variable = waivers.entries
    assert by_id.matches({"invariant": "sc-0123456789ab", "relation": "StateTransition", "step": 7})
    assert not by_id.matches({"invariant": "sc-0123456789ac", "relation": "StateTransition", "step": 7})
    api = {"invariant": "as-000000000000", "relation": "APISequence", "api": "torch.optim.adam.Adam.step"}
    assert by_api.matches({**api, "step": 100}) and by_api.matches({**api, "step": 200})
    assert not by_api.matches({**api, "step": 99}) and not by_api.matches({**api, "step": 201})
    assert not by_api.matches({**api, "step": None})  # a range says nothing of a violation without a step
    assert not by_api.matches({**api, "relation": "EventContain", "step": 150})
    assert not by_api.matches({**api, "api": "Torch.optim.Adam.step", "step": 150})  # case-sensitive
    bias = {"invariant": "st-000000000000", "relation": "StateTransition", "variable": "model.fc1.bias"}
    assert by_variable.matches({**bias, "step": 3}) and by_variable.matches({**bias, "step": 10_000})
    assert not by_variable.matches({**bias, "step": 2})
    assert not by_variable.matches({**bias, "variable": "model.fc1.weight", "step": 5})
    assert not by_variable.matches({"invariant": "st-000000000000", "relation": "StateTransition", "step": 5})
    # The first waiver that covers a violation takes it; the others stay unmatched (stale).
    assert waivers.match({**bias, "step": 4}) is by_variable
    assert [w.index for w in waivers.stale()] == [0, 1]


def test_a_waived_record_is_info_marked_and_readable(tmp_path):
    from traincheck_agent.check.waivers import waived_mark
    from traincheck_agent.report.violations import violation_record

    waiver = Waiver(0, "known", invariant="sc-0123456789ab")
    record = violation_record({"invariant": "sc-0123456789ab", "relation": "StateTransition", "step": 2,
                               "message": "m"}, None, rank=0, run_id="r", waived=waived_mark(waiver, "w.yaml"))
    assert record["severity"] == "INFO" and record["severity_number"] == 9
    assert record["waived"] == {"reason": "known", "waiver": 0, "file": "w.yaml"}
    assert record["attributes"]["traincheck.waived"] is True
    assert record["attributes"]["traincheck.waiver.reason"] == "known"
    assert record_problem(record) == ""
    assert record_problem({**record, "waived": "yes"}) == "`waived` is not an object"
    assert record_problem({**record, "waived": {"reason": "r", "waiver": "0"}}) == "`waived.waiver` is not an integer"


def test_trainchek_waive_is_one_file_and_only_in_check_mode(tmp_path):
    env = {"TRAINCHECK_MODE": "check", "TRAINCHECK_WAIVE": str(tmp_path / "w.yaml")}
    assert Settings.from_env(env).waivers_file == tmp_path / "w.yaml"
    assert Settings.from_env({**env, "TRAINCHECK_MODE": "collect"}).waivers_file is None
    assert Settings.from_env({"TRAINCHECK_MODE": "check"}).waivers_file is None
    assert Settings.from_env({**env, "TRAINCHECK_WAIVE": f"a.yaml{os.pathsep}b.yaml"}).waivers_file is None


# ------------------------------------------------------------------------------ real runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Invariants of two clean MLP runs, and the trace of a run that never clears its grads."""
    root = tmp_path_factory.mktemp("waiver_runs")
    collect_in_process(MLP, root / "ref", "--steps", "10")
    collect_in_process(MLP, root / "frozen", "--steps", "8", "--freeze-backbone")
    invariants, files = infer_invariants([root / "ref", root / "frozen"])
    write_invariants(invariants, root / "inv.json", [str(f) for f in files])
    collect_in_process(MLP, root / "bug", "--steps", "4", "--bug", "no-zero-grad")
    return {"inv": root / "inv.json", "bug": root / "bug"}


def _ids(inv: Path, relation: str) -> list[str]:
    return [i.id for i in read_invariants(inv) if i.relation == relation]


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(out.glob("violations-*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


def _sequence_waiver(runs: dict[str, Path], path: Path) -> str:
    """Waive, through the CLI, the call-order invariant that the missing zero_grad breaks."""
    [sequence] = [i for i in _ids(runs["inv"], "APISequence")
                  if i in {v["invariant"] for v in _offline(runs) if v["relation"] == "APISequence"}]
    assert main(["invariants", "waive", str(runs["inv"]), sequence, "--reason", "zero_grad is skipped on purpose",
                 "--file", str(path)]) == 0
    return sequence


def _offline(runs: dict[str, Path]) -> list[dict]:
    from traincheck_agent.check.offline import check_offline

    return check_offline(read_invariants(runs["inv"]), [runs["bug"]])


def test_waive_appends_to_the_users_file_and_keeps_it(runs, tmp_path, capsys):
    path = tmp_path / "traincheck-waivers.yaml"
    [first, second, *_] = _ids(runs["inv"], "StateTransition")
    assert main(["invariants", "waive", str(runs["inv"]), first, "--reason", "known", "--file", str(path)]) == 0
    created = path.read_text()
    assert "version: 1" in created and f'id: "{first}"' in created
    own = created + "  # ours: keep this comment\n\n"
    path.write_text(own)
    assert main(["invariants", "waive", str(runs["inv"]), second, "--reason", 'warm-up "noise"\n(see #12)',
                 "--steps", "0-3", "--file", str(path)]) == 0
    assert main(["invariants", "waive", "--relation", "APISequence", "--api", "torch.optim.*",
                 "--reason", "pattern", "--file", str(path)]) == 0
    text = path.read_text()
    assert text.startswith(own)  # every byte of the user's file is still there
    waivers = read_waivers(path)
    assert [(w.invariant, w.relation, w.api, w.first_step, w.last_step) for w in waivers.entries] == [
        (first, None, None, None, None), (second, None, None, 0, 3), (None, "APISequence", "torch.optim.*", None, None)]
    assert waivers.entries[1].reason == 'warm-up "noise"\n(see #12)'
    assert "waived invariant" in capsys.readouterr().out
    # The same waiver again adds nothing.
    assert main(["invariants", "waive", str(runs["inv"]), first, "--reason", "again", "--file", str(path)]) == 0
    assert path.read_text() == text
    assert "already waived by waivers[0]" in capsys.readouterr().out


@pytest.mark.parametrize("args, problem", [
    (["st-000000000000"], "no invariant with id 'st-000000000000'"),
    (["{first}", "--steps", "9-2"], "--steps: the range ends before it starts"),
    (["{first}", "--reason", " "], "non-empty string"),
    (["{first}", "--api", "x.*"], "--api and --variable go with --relation"),
    (["--relation", "APISequence"], "--relation needs --api and/or --variable"),
    (["--relation", "Nope", "--api", "*"], "--relation: unknown relation 'Nope'"),
])
def test_waive_refuses_bad_arguments_and_leaves_the_file(runs, tmp_path, capsys, args, problem):
    path = tmp_path / "w.yaml"
    path.write_text("version: 1\nwaivers:\n")
    first = _ids(runs["inv"], "StateTransition")[0]
    args = [a.format(first=first) for a in args]
    inv = [] if args[0].startswith("--") else [str(runs["inv"])]
    reason = [] if "--reason" in args else ["--reason", "r"]
    assert main(["invariants", "waive", *inv, *args, *reason, "--file", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("traincheck: error: ") and problem in err, err
    assert err.count("\n") == 1
    assert path.read_text() == "version: 1\nwaivers:\n"


def test_waive_will_not_append_where_the_list_is_not_last(runs, tmp_path, capsys):
    first = _ids(runs["inv"], "StateTransition")[0]
    for text in ("version: 1\nwaivers: []\n",
                 "waivers:\n  - id: sc-0123456789ab\n    reason: r\nversion: 1\n"):
        path = tmp_path / "w.yaml"
        path.write_text(text)
        assert main(["invariants", "waive", str(runs["inv"]), first, "--reason", "r", "--file", str(path)]) == 2
        assert "cannot append a waiver" in capsys.readouterr().err
        assert path.read_text() == text
    path.write_text("version: 1\nwaivers:\n  - id: sc-0123456789ab\n")  # a bad file is named, not touched
    assert main(["invariants", "waive", str(runs["inv"]), first, "--reason", "r", "--file", str(path)]) == 2
    assert f"{path}: waivers[0]: missing reason" in capsys.readouterr().err


def test_online_check_logs_a_waived_violation_without_a_failure_line(runs, tmp_path, capsys):
    waivers = tmp_path / "traincheck-waivers.yaml"
    sequence = _sequence_waiver(runs, waivers)
    stale_api = "nothing.matches.this"
    assert main(["invariants", "waive", "--relation", "APISequence", "--api", stale_api,
                 "--reason", "stale one", "--file", str(waivers)]) == 0
    capsys.readouterr()
    out = tmp_path / "check"
    with agent_active("check", out, TRAINCHECK_INV=str(runs["inv"]), TRAINCHECK_WAIVE=str(waivers)):
        run_script(MLP, "--steps", "4", "--bug", "no-zero-grad")
    err = capsys.readouterr().err
    records = [r for r in _records(out) if not r.get("event")]
    waived = [r for r in records if r.get("waived")]
    assert [r["step"] for r in waived] == [1, 2, 3]
    assert {r["invariant"] for r in waived} == {sequence}
    assert all(r["severity"] == "INFO" and r["waived"]["reason"] == "zero_grad is skipped on purpose"
               and r["waived"]["waiver"] == 0 and r["attributes"]["traincheck.waived"] for r in waived)
    assert all(r["severity"] == "ERROR" for r in records if not r.get("waived"))
    assert any(r["relation"] == "StateTransition" for r in records if not r.get("waived"))  # still caught
    assert sequence not in "".join(line for line in err.splitlines() if "violation at" in line)
    assert "violation at rank 0 step 1" in err  # the unwaived ones are still shown
    [summary] = [line for line in err.splitlines() if "check summary" in line]
    assert "3 violations waived" in summary
    assert f"{sequence} x" not in summary
    assert f"waiver 1 of {waivers} (APISequence, api {stale_api}) matched nothing in this run" in err
    [tally] = [r for r in _records(out) if r.get("event") == "waivers"]
    assert [e["matched"] for e in tally["waivers"]["entries"]] == [3, 0]

    # The report lists them under Waived, with the stale waiver, and leaves them out of the groups.
    html = tmp_path / "report.html"
    assert main(["report", str(out), "-o", str(html)]) == 0
    page = html.read_text()
    assert '<section id="waived"><h2>Waived</h2>' in page and "zero_grad is skipped on purpose" in page
    assert "matched nothing on any rank" in page and stale_api in page


def test_a_bad_waivers_file_in_check_mode_is_one_warning_and_waives_nothing(runs, tmp_path, capsys):
    waivers = tmp_path / "w.yaml"
    waivers.write_text("version: 1\nwaivers:\n  - id: sc-0123456789ab\n")
    out = tmp_path / "check"
    with agent_active("check", out, TRAINCHECK_INV=str(runs["inv"]), TRAINCHECK_WAIVE=str(waivers)):
        run_script(MLP, "--steps", "3", "--bug", "no-zero-grad")
    err = capsys.readouterr().err
    [warning] = [line for line in err.splitlines() if "warning: waivers file" in line]
    assert f"waivers file {waivers}: waivers[0]: missing reason" in warning
    assert warning.endswith("; no violation is waived")
    records = [r for r in _records(out) if not r.get("event")]
    assert records and not any(r.get("waived") for r in records)


def test_offline_check_with_waivers(runs, tmp_path, capsys):
    violated = {v["invariant"]: v["relation"] for v in _offline(runs)}
    assert len(violated) > 1
    waivers = tmp_path / "w.yaml"
    for invariant in sorted(violated):
        assert main(["invariants", "waive", str(runs["inv"]), invariant, "--reason", "accepted",
                     "--file", str(waivers)]) == 0
    assert main(["invariants", "waive", "--relation", "StateTransition", "--variable", "no.such.*",
                 "--reason", "stale", "--file", str(waivers)]) == 0
    capsys.readouterr()
    out = tmp_path / "all"
    assert main(["check", str(runs["bug"]), "-i", str(runs["inv"]), "--out", str(out), "--waive", str(waivers)]) == 0
    printed = capsys.readouterr()
    assert "violation at" not in printed.err
    records = [r for r in _records(out) if not r.get("event")]
    assert records and all(r.get("waived") and r["severity"] == "INFO" for r in records)
    assert f"{len(records)} violations waived by {waivers}" in printed.out
    assert f"waiver {len(violated)} of {waivers} (StateTransition, variable no.such.*) matched nothing" in printed.out
    assert "no violations" in printed.out

    # Waiving some of them: the rest still fail the check.
    some = tmp_path / "some.yaml"
    sequence = _sequence_waiver(runs, some)
    capsys.readouterr()
    out = tmp_path / "some"
    assert main(["check", str(runs["bug"]), "-i", str(runs["inv"]), "--out", str(out), "--waive", str(some)]) == 1
    printed = capsys.readouterr()
    assert sequence not in printed.err and "violation at" in printed.err
    records = [r for r in _records(out) if not r.get("event")]
    assert {r["invariant"] for r in records if r.get("waived")} == {sequence}

    # The report judges the unmarked records against a waivers file given to it.
    html = tmp_path / "report.html"
    assert main(["report", str(out), "-o", str(html), "--waive", str(waivers)]) == 0
    page = html.read_text()
    assert "every violation was waived" in page and "no.such.*" in page
    assert "stale: waiver" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 3\n")
    assert main(["check", str(runs["bug"]), "-i", str(runs["inv"]), "--out", str(out), "--waive", str(bad)]) == 2
    assert main(["report", str(out), "--waive", str(bad)]) == 2
    assert capsys.readouterr().err.count(f"traincheck: error: {bad}: version: unsupported version 3") == 2


def test_a_waiver_matched_on_any_rank_is_not_stale():
    from traincheck_agent.check.waivers import merge_tallies

    def tally(*matched: int) -> dict:
        return {"file": "w.yaml", "entries": [{"index": i, "label": f"w{i}", "reason": "r", "matched": n}
                                              for i, n in enumerate(matched)]}

    merged = merge_tallies([tally(0, 2, 0), tally(3, 0, 0), {"file": "w.yaml", "entries": "junk"}])
    assert [(e["index"], e["matched"]) for e in merged] == [(0, 3), (1, 2), (2, 0)]


@pytest.mark.parametrize("rank, said", [(0, "1 of 1 waivers of"), (1, None)])
def test_with_several_ranks_only_rank_0_counts_unmatched_waivers(runs, tmp_path, capsys, rank, said):
    from traincheck_agent.agent.checking.check_mode import CheckSink

    path = tmp_path / "w.yaml"
    path.write_text("version: 1\nwaivers:\n  - id: sc-0123456789ab\n    reason: r\n")
    sink = CheckSink(read_invariants(runs["inv"]), out_dir=tmp_path / "out", waivers=read_waivers(path))
    sink.consume([{"kind": "header", "schema": 1, "rank": rank, "world_size": 2, "run_id": "r"}])
    sink.close()
    err = capsys.readouterr().err
    assert "it may be stale" not in err  # another rank may have matched it
    assert (said in err) if said else "waivers of" not in err
    [tally] = [r for r in _records(tmp_path / "out") if r.get("event") == "waivers"]
    assert tally["rank"] == rank and tally["waivers"]["entries"][0]["matched"] == 0


def test_a_waived_violation_never_stops_the_training(runs, tmp_path, capsys):
    waivers = tmp_path / "w.yaml"
    for invariant in sorted({v["invariant"] for v in _offline(runs)}):
        assert main(["invariants", "waive", str(runs["inv"]), invariant, "--reason", "accepted",
                     "--file", str(waivers)]) == 0
    out = tmp_path / "check"
    with agent_active("check", out, TRAINCHECK_INV=str(runs["inv"]), TRAINCHECK_WAIVE=str(waivers),
                      TRAINCHECK_ACTION="raise"):
        run_script(MLP, "--steps", "4", "--bug", "no-zero-grad")  # raises TrainCheckViolation if acted on
    err = capsys.readouterr().err
    assert "violation at" not in err
    records = [r for r in _records(out) if not r.get("event")]
    assert records and all(r.get("waived") for r in records)
    assert "check summary (rank 0): no violations" in err and f"{len(records)} violations waived" in err


@pytest.mark.slow
def test_reading_waivers_imports_no_torch(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "w.yaml"
    path.write_text(GOOD)
    code = ("import sys\nfrom traincheck_agent.check.waivers import read_waivers\n"
            f"assert len(read_waivers({str(path)!r}).entries) == 3\nprint('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
