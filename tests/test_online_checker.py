"""The online checker gives, record by record, the verdicts of the offline check."""

from __future__ import annotations

from pathlib import Path

from conftest import collect_mlp

from traincheck_agent.check.online import OnlineChecker
from traincheck_agent.inference.engine import check_offline, infer_invariants
from traincheck_agent.trace.reader import TraceFile, find_trace_files

_collect = collect_mlp


def _online(invariants, trace_dir: Path) -> tuple[list[dict], list[int]]:
    """Violations reported while feeding the trace, and how many records had been fed when
    each was reported."""
    found, fed_when = [], []
    fed = [0]
    checker = OnlineChecker(invariants, lambda v: (found.append(v), fed_when.append(fed[0])))
    [path] = find_trace_files([trace_dir])
    trace = TraceFile(path)
    checker.feed(trace.header)
    for record in trace.records():
        fed[0] += 1
        checker.feed(record)
    checker.finish()
    return found, fed_when


def _key(v: dict) -> tuple:
    return v["invariant"], v["step"], v.get("variable", ""), v.get("api", ""), v["message"]


def test_online_verdicts_equal_the_offline_ones_and_come_early(tmp_path):
    invariants, _ = infer_invariants([_collect(tmp_path, "ref", "--steps", "8"),
                                      _collect(tmp_path, "ref2", "--steps", "6", "--seed", "2")])
    for bug in ("no-zero-grad", "optimizer-over-frozen"):
        run = _collect(tmp_path, bug, "--steps", "5", "--bug", bug)
        offline = check_offline(invariants, [run])
        online, fed_when = _online(invariants, run)
        assert offline and sorted(map(_key, online)) == sorted(map(_key, offline))
        total = sum(1 for _ in TraceFile(find_trace_files([run])[0]).records())
        first = min(range(len(online)), key=lambda i: online[i]["step"])
        assert fed_when[first] < total / 2  # reported while the run was young, not at the end
    clean = _collect(tmp_path, "clean", "--steps", "4", "--seed", "7")
    assert _online(invariants, clean)[0] == [] == check_offline(invariants, [clean])


def test_cross_rank_relations_are_left_to_the_exchange():
    from traincheck_agent.inference.invariant import Invariant

    inv = Invariant("CrossRankConsistent", {"event": "after:optimizer.step", "attribute": "data"}, ())
    checker = OnlineChecker([inv], lambda v: None)
    assert checker.skipped_relations == ["CrossRankConsistent"] and checker.relations == []
