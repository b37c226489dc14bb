"""``traincheck infer --update``: a legitimate variant that raised false alarms is folded into
the references; the result equals a fresh infer over all traces, the variant passes, a bug the
old invariants caught is still caught, and every change is explained.

Reference A is the MLP pipeline as it is; variant B starts its output layer at zero (the
backbone gets no grad at the first step) and warms its learning rate up from zero: a false
alarm against A's invariants ("backward leaves the grad non-zero"), and an lr that a scheduler
moves where A's had none, outside what A showed ("the lr stays constant" does not judge it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import PIPELINES, collect_in_process, violations_in

from traincheck_agent.cli import main
from traincheck_agent.inference import relations
from traincheck_agent.inference.engine import learn
from traincheck_agent.inference.invariant import Invariant, read_invariants, read_invariants_file
from traincheck_agent.inference.preconditions import Clause
from traincheck_agent.inference.update import NARROWED, compare
from traincheck_agent.trace.reader import find_trace_files

MLP = PIPELINES / "mlp_train.py"
VARIANT = ("--zero-init-head", "--warmup", "2")
LEAVES_NONZERO = "st-9608c99470d6"  # backward leaves the grad non-zero, when first_in_step = True
LR_CONSTANT = "vp-c35313376142"  # the lr of param group 0 stays constant across steps


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("update")
    out = {}
    for name, args in (("A", ()), ("B", VARIANT), ("bug", ("--steps", "4", "--bug", "no-zero-grad"))):
        out[name] = root / name
        collect_in_process(MLP, out[name], *args)
    out["root"] = root
    out["inv"] = root / "inv.json"
    assert main(["infer", str(out["A"]), "-o", str(out["inv"])]) == 0
    return out


def _copy_of_inv(runs: dict[str, Path], name: str) -> Path:
    """A copy of A's invariants file beside it (the references it records stay reachable)."""
    copy = runs["root"] / name
    shutil.copyfile(runs["inv"], copy)
    return copy


def _violated(runs: dict[str, Path], traces: Path, inv: Path, out: Path) -> set[str]:
    status = main(["check", str(traces), "-i", str(inv), "--out", str(out)])
    found = {record["invariant"] for record in violations_in(out)}
    assert status == (1 if found else 0)
    return found


@pytest.fixture(scope="module")
def updated(runs, tmp_path_factory):
    """A's invariants updated with B, and what the update printed."""
    import contextlib
    import io

    inv = _copy_of_inv(runs, "updated.json")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["infer", "--update", str(inv), str(runs["B"])]) == 0
    return inv, printed.getvalue()


def test_the_variant_raises_false_alarms_against_the_old_invariants(runs, tmp_path):
    found = _violated(runs, runs["B"], runs["inv"], tmp_path / "v")
    assert LEAVES_NONZERO in found and LR_CONSTANT not in found


def test_update_names_what_it_removed_and_why(updated, runs):
    _, printed = updated
    [b_trace] = find_trace_files([runs["B"]])
    lines = printed.splitlines()
    removed = lines[lines.index(next(line for line in lines if line.startswith("removed"))):]
    by_id = {line.split()[0]: line for line in removed if line.startswith("  ")}
    assert f"broken by {b_trace.name} step 0, model.backbone." in by_id[LEAVES_NONZERO]
    assert "grad: none -> zero" in by_id[LEAVES_NONZERO]
    assert f"broken by {b_trace.name} step 1, optimizer.param_groups.0: lr changed from 0.0" in by_id[LR_CONSTANT]
    assert any(line.startswith("added (") for line in lines)
    assert lines[-2].startswith("changes: 2 removed")
    assert "from 2 trace file(s), 1 new" in lines[-1]


def test_update_equals_a_fresh_infer_over_all_traces(updated, runs):
    inv, _ = updated
    fresh = runs["root"] / "fresh.json"
    assert main(["infer", str(runs["B"]), str(runs["A"]), "-o", str(fresh)]) == 0
    assert fresh.read_bytes() == inv.read_bytes()


def test_traces_elsewhere_give_the_same_invariants(updated, runs, tmp_path):
    """Traces are read in order of name, not of path: copies in other directories (sorting
    the other way round) learn the same file, apart from where it records them."""
    inv, _ = updated
    shutil.copytree(runs["A"], tmp_path / "z_first")
    shutil.copytree(runs["B"], tmp_path / "a_second")
    elsewhere = tmp_path / "elsewhere.json"
    assert main(["infer", str(tmp_path / "a_second"), str(tmp_path / "z_first"), "-o", str(elsewhere)]) == 0
    mine, theirs = json.loads(inv.read_text()), json.loads(elsewhere.read_text())
    assert mine["invariants"] == theirs["invariants"] and mine["sources"] == theirs["sources"]
    assert [r["digest"] for r in mine["references"]] == [r["digest"] for r in theirs["references"]]


def test_the_variant_passes_the_updated_invariants(updated, runs, tmp_path):
    inv, _ = updated
    assert _violated(runs, runs["B"], inv, tmp_path / "v") == set()


def test_a_bug_caught_before_is_still_caught(updated, runs, tmp_path):
    """Monotone: an old invariant the bug breaks, and that the update kept, still catches it."""
    inv, _ = updated
    before = _violated(runs, runs["bug"], runs["inv"], tmp_path / "old")
    after = _violated(runs, runs["bug"], inv, tmp_path / "new")
    kept = {i.id for i in read_invariants(inv)}
    assert before and (before & kept) <= after
    assert "st-836bef9fe15e" in after  # backward finds the grad None or zero


def test_update_records_where_the_references_are(updated, runs):
    inv, _ = updated
    doc = read_invariants_file(inv)
    assert doc.references is not None
    assert sorted(r.path.split("/")[0] for r in doc.references) == ["A", "B"]
    assert {r.name for r in doc.references} == set(doc.sources)


def test_json_summary(runs, capsys):
    inv = _copy_of_inv(runs, "json.json")
    assert main(["infer", "--update", str(inv), str(runs["B"]), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counts"]["removed"] == 2
    removed = {c["old"]["id"]: c for c in report["changes"] if c["kind"] == "removed"}
    assert removed[LEAVES_NONZERO]["counterexample"]["step"] == 0
    assert removed[LR_CONSTANT]["counterexample"]["subject"] == "optimizer.param_groups.0"
    assert report["new_traces"] == [f.name for f in find_trace_files([runs["B"]])]


def test_updating_with_an_old_reference_changes_nothing(runs, capsys):
    inv = _copy_of_inv(runs, "again.json")
    assert main(["infer", "--update", str(inv), str(runs["A"])]) == 0
    assert "changes: none" in capsys.readouterr().out
    assert inv.read_text() == runs["inv"].read_text()


def test_missing_reference_exits_2_naming_it(runs, tmp_path, capsys):
    moved = tmp_path / "A"
    shutil.copytree(runs["A"], moved)
    inv = tmp_path / "inv.json"
    assert main(["infer", str(moved), "-o", str(inv)]) == 0
    shutil.move(moved, tmp_path / "A-moved")
    capsys.readouterr()
    assert main(["infer", "--update", str(inv), str(runs["B"])]) == 2
    err = capsys.readouterr().err
    [name] = [p.name for p in find_trace_files([runs["A"]])]
    assert f"reference trace A/{name} is missing" in err and "--references" in err
    assert "Traceback" not in err
    # Named explicitly, the moved references are used.
    assert main(["infer", "--update", str(inv), str(runs["B"]), "--references", str(tmp_path / "A-moved")]) == 0
    assert "changes: 2 removed" in capsys.readouterr().out


def test_changed_reference_exits_2(runs, tmp_path, capsys):
    copy = tmp_path / "A"
    shutil.copytree(runs["A"], copy)
    inv = tmp_path / "inv.json"
    assert main(["infer", str(copy), "-o", str(inv)]) == 0
    [trace] = find_trace_files([copy])
    with trace.open("a") as f:
        f.write('{"kind": "call"}\n')
    capsys.readouterr()
    assert main(["infer", "--update", str(inv), str(runs["B"])]) == 2
    err = capsys.readouterr().err
    assert "has changed since the invariants were learned" in err and "--references" in err


def test_file_without_references_asks_for_them(runs, tmp_path, capsys):
    doc = json.loads(runs["inv"].read_text())
    del doc["references"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    assert main(["infer", "--update", str(old), str(runs["B"])]) == 2
    err = capsys.readouterr().err
    assert "does not record where its reference traces are" in err and "--references" in err
    assert doc["sources"][0] in err
    assert main(["infer", "--update", str(old), str(runs["B"]), "--references", str(runs["A"]),
                 "-o", str(runs["root"] / "from_old.json")]) == 0
    fresh = runs["root"] / "fresh_for_old.json"
    assert main(["infer", str(runs["A"]), str(runs["B"]), "-o", str(fresh)]) == 0
    assert (runs["root"] / "from_old.json").read_bytes() == fresh.read_bytes()


def test_malformed_references_exit_2_naming_the_entry(runs, tmp_path, capsys):
    doc = json.loads(runs["inv"].read_text())
    doc["references"][0]["size"] = "big"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    assert main(["infer", "--update", str(bad), str(runs["B"])]) == 2
    assert "references[0]: 'size' should be int" in capsys.readouterr().err


def test_references_without_update_is_refused(runs, capsys):
    assert main(["infer", str(runs["A"]), "--references", str(runs["A"])]) == 2
    assert "--update" in capsys.readouterr().err


def test_summary_escapes_control_characters_of_trace_names(runs, tmp_path, capsys):
    [b_trace] = find_trace_files([runs["B"]])
    odd = tmp_path / "B"
    odd.mkdir()
    shutil.copyfile(b_trace, odd / b_trace.name.replace("_rank0", "_\x1b[31m_rank0"))
    inv = tmp_path / "inv.json"
    shutil.copyfile(runs["inv"], inv)
    doc = json.loads(inv.read_text())  # the references, as seen from here
    for ref in doc["references"]:
        ref["path"] = str(Path("..") / runs["inv"].parent.name / ref["path"])
    inv.write_text(json.dumps(doc))
    assert main(["infer", "--update", str(inv), str(odd)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[31m" in out


def test_a_counterexample_a_precondition_separates_narrows(runs):
    """An old form that the new references break where a clause tells the breaking examples
    apart is narrowed, and the first breaking example is named: here the old form is A's
    "backward leaves the grad non-zero", the new one the same scoped to later steps."""
    learned = learn([runs["A"], runs["B"]])
    [old] = [i for i in read_invariants(runs["inv"]) if i.id == LEAVES_NONZERO]
    narrower = Invariant(old.relation, old.subject, (*old.precondition, Clause("first_step", False)),
                         description="later steps", domain=old.domain)
    b_traces = {p.name for p in find_trace_files([runs["B"]])}
    assert any(relations.module(old.relation).violates(old, e)  # B breaks it at its first step
               for e in learned.examples[old.relation][("backward", "grad")] if e.trace in b_traces and e.step == 0)
    [change] = compare([old], [narrower], learned.examples, b_traces)
    assert change.kind == NARROWED and change.new == (narrower,)
    assert change.detail == "now when first_in_step = True and first_step = False"
    assert change.counterexample is not None and change.counterexample.step == 0
    assert change.counterexample.subject.startswith("model.backbone.")


def test_a_domain_that_grew_is_widened(runs):
    [old] = [i for i in read_invariants(runs["inv"]) if i.id == LEAVES_NONZERO]
    grown = Invariant(old.relation, old.subject, old.precondition, domain={**old.domain, "dtype": ["bfloat16", "float32"]})
    [change] = compare([old], [grown], {})
    assert (change.kind, change.detail) == ("widened", "domain: dtype + bfloat16")
