"""The online checker gives, record by record, the verdicts of the offline check."""

from __future__ import annotations

import subprocess
import sys
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


def test_a_checker_imports_only_the_relations_its_invariants_use():
    """Each entry of the relation table names the module that defines that relation, and a fresh
    interpreter that builds a checker of StateTransition invariants imports no other relation."""
    from traincheck_agent.inference import relations

    assert [module.RELATION for module in relations.load()] == list(relations.MODULES)
    script = (
        "import sys\n"
        "from traincheck_agent.check.online import OnlineChecker\n"
        "from traincheck_agent.inference.invariant import Invariant\n"
        "inv = Invariant(relation='StateTransition', subject={'event': 'backward', 'attribute': 'grad',"
        " 'effect': 'changed'}, precondition=())\n"
        "OnlineChecker([inv], print)\n"
        "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('traincheck_agent.inference.relations.')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "['state_transition']"
