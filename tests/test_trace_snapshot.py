"""Snapshot records: one record of columns per snapshot point, read back as the per-variable
state records it stands for."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from conftest import collect_mlp_here, read_traces

from traincheck_agent.trace.reader import TraceFile, TraceFormatError, find_trace_files
from traincheck_agent.trace.schema import KIND_SNAPSHOT, KIND_STATE, SCHEMA_VERSION
from traincheck_agent.trace.snapshot import (
    ABSENT,
    SnapshotBuilder,
    SnapshotFormatError,
    blocks_of,
    expand,
    variables_in,
)

BASE = {"where": "after:optimizer.step", "call": 7, "step": 3, "phase": "train", "t_ns": 1}
FP_A = {"h": "x3:00000000000000aa", "zero": False, "nonfinite": False}
FP_B = {"h": "x3:00000000000000bb", "zero": True, "nonfinite": False}


def _state(var: str, vtype: str, attrs: dict, owner: str | None = None) -> dict:
    out = dict(BASE, kind=KIND_STATE, var=var, vtype=vtype, attrs=attrs)
    if owner is not None:
        out["owner"] = owner
    return out


def test_columns_rows_and_extras_expand_to_the_records_they_stand_for() -> None:
    snap = SnapshotBuilder(BASE)
    snap.add_columns(["m.w", "m.b"], "Parameter", ["model", None],
                     {"dtype": ["float32", "float32"], "data": [FP_A, FP_B], "grad": [None, FP_A]},
                     extra=[[1, {"tensor_model_parallel": True}]])
    snap.add_row("opt.param_groups.0", "param_group", "opt", {"lr": 0.1})
    snap.add_row("opt.param_groups.1", "param_group", "opt", {"lr": 0.2})  # joins the row above
    snap.add_row("opt.settings", "optimizer_settings", "opt", {"clip_grad": 1.0})
    snap.add_columns([], "buffer", None, {})  # an empty block is left out
    record = snap.built()
    assert record is not None and record["kind"] == KIND_SNAPSHOT
    assert len(record["blocks"]) == 3 and variables_in(record) == 5
    assert list(expand(orjson.loads(orjson.dumps(record)))) == [
        _state("m.w", "Parameter", {"dtype": "float32", "data": FP_A, "grad": None}, "model"),
        _state("m.b", "Parameter", {"dtype": "float32", "data": FP_B, "grad": FP_A, "tensor_model_parallel": True}),
        _state("opt.param_groups.0", "param_group", {"lr": 0.1}, "opt"),
        _state("opt.param_groups.1", "param_group", {"lr": 0.2}, "opt"),
        _state("opt.settings", "optimizer_settings", {"clip_grad": 1.0}, "opt"),
    ]


def test_a_column_reads_one_attribute_of_every_variable_with_extras_in_place() -> None:
    snap = SnapshotBuilder(BASE)
    snap.add_columns(["m.w", "m.b", "m.c"], "Parameter", "model", {"data": [FP_A, FP_B, None]},
                     extra=[[1, {"tensor_model_parallel": True, "data": FP_A}]])
    record = snap.built()
    assert record is not None
    [block] = blocks_of(record)
    assert block.column("data") == [FP_A, FP_A, None]
    assert block.column("tensor_model_parallel") == [ABSENT, True, ABSENT]
    assert block.column("grad") == [ABSENT] * 3
    assert record["blocks"][0]["cols"]["data"] == [FP_A, FP_B, None]  # the record is left as it was
    assert [block.attrs(i) for i in range(3)] == [{"data": FP_A}, {"data": FP_A, "tensor_model_parallel": True},
                                                  {"data": None}]


def test_a_record_is_checked_once_while_its_blocks_stay_the_same() -> None:
    """The relations that read a snapshot ask for its blocks in turn: the second asks get the
    blocks checked by the first, and a record whose list of blocks changed is checked again."""
    snap = SnapshotBuilder(BASE)
    snap.add_columns(["m.w"], "Parameter", "model", {"data": [FP_A]})
    record = snap.built()
    assert record is not None
    first = blocks_of(record)
    assert blocks_of(record) is first
    record["blocks"].append({"vars": ["m.b"], "vtype": "Parameter", "cols": {"data": "not a column"}})
    with pytest.raises(SnapshotFormatError, match="column 'data' does not have 1 entries"):
        blocks_of(record)
    record["blocks"] = [{"vars": ["m.b"], "vtype": "Parameter", "cols": {"data": [FP_B]}}]
    assert [block.names for block in blocks_of(record)] == [["m.b"]]


def test_a_point_that_looked_at_nothing_gives_no_record() -> None:
    assert SnapshotBuilder(BASE).built() is None


@pytest.mark.parametrize("blocks, problem", [
    ("x", "without a list of blocks"),
    ([[1]], "not an object"),
    ([{"vars": ["a", 2], "vtype": "P", "cols": {}}], "'vars' is not a list of names"),
    ([{"vars": ["a"], "vtype": "P", "cols": {"data": []}}], "column 'data' does not have 1 entries"),
    ([{"vars": ["a"], "cols": {}}], "without a 'vtype'"),
    ([{"vars": ["a"], "vtype": ["P", "Q"], "cols": {}}], "'vtype' has 2 entries for 1 variables"),
    ([{"vars": ["a"], "vtype": "P", "cols": {}, "extra": [[5, {}]]}], "'extra' is not a list"),
])
def test_malformed_blocks_are_named(blocks: object, problem: str) -> None:
    with pytest.raises(SnapshotFormatError, match=problem):
        list(expand(dict(BASE, kind=KIND_SNAPSHOT, blocks=blocks)))


def _write(path: Path, records: list[dict]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def test_reader_expands_snapshots_and_names_the_line_of_a_bad_one(tmp_path: Path) -> None:
    header = {"kind": "header", "schema": SCHEMA_VERSION, "run_id": "r", "rank": 0, "pid": 1}
    good = dict(BASE, kind=KIND_SNAPSHOT, blocks=[{"vars": ["a", "b"], "vtype": "Parameter", "cols": {"data": [FP_A, FP_B]}}])
    call = {"kind": "call", "api": "torch.add", "id": 1}
    path = _write(tmp_path / "trace_r_rank0_pid1.jsonl", [header, good, call])
    assert [(r["kind"], r.get("var")) for r in TraceFile(path).records()] == [
        (KIND_STATE, "a"), (KIND_STATE, "b"), ("call", None)]
    bad = dict(good, blocks=[{"vars": ["a"], "vtype": "Parameter", "cols": {"data": []}}])
    path = _write(tmp_path / "trace_r_rank0_pid2.jsonl", [header, call, bad, call])
    with pytest.raises(TraceFormatError, match=r"pid2\.jsonl:3: line is a block whose column 'data'"):
        list(TraceFile(path).records())


def test_schema_1_traces_with_per_variable_state_records_still_read(tmp_path: Path) -> None:
    header = {"kind": "header", "schema": 1, "run_id": "r", "rank": 0, "pid": 1}
    state = _state("m.w", "Parameter", {"data": FP_A})
    path = _write(tmp_path / "trace_r_rank0_pid1.jsonl", [header, state])
    assert list(TraceFile(path).records()) == [state]


def test_collect_mode_writes_one_record_per_snapshot_point(tmp_path: Path) -> None:
    out = collect_mlp_here(tmp_path, "mlp", "--steps", "3")
    [path] = find_trace_files([out])
    raw = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    snapshots = [r for r in raw if r["kind"] == KIND_SNAPSHOT]
    assert snapshots and not any(r["kind"] == KIND_STATE for r in raw)
    # One record per point of each step, each holding every parameter once.
    points = [(r["step"], r["where"], r["call"]) for r in snapshots]
    assert len(points) == len(set(points))
    [trace] = read_traces(out)
    states = [r for r in trace.records if r["kind"] == KIND_STATE]
    assert len(states) == sum(variables_in(r) for r in snapshots)
    params = {r["var"] for r in states if r["vtype"] == "Parameter"}
    for snapshot in snapshots:
        names = [name for block in snapshot["blocks"] for name in block["vars"]]
        assert len(names) == len(set(names))
        if snapshot["where"] == "after:optimizer.step":
            assert params <= set(names)
