"""The online checker gives, record by record, the verdicts of the offline check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import collect_mlp_in_process

from traincheck_agent.check.offline import check_offline
from traincheck_agent.check.online import OnlineChecker
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.trace.reader import TraceFile, find_trace_files


def _online(invariants, trace_dir: Path, checker_of=OnlineChecker) -> tuple[list[dict], list[int]]:
    """Violations reported while feeding the trace's records as the agent does (a snapshot
    point as one record), and how many records had been fed when each was reported."""
    found, fed_when = [], []
    fed = [0]
    checker = checker_of(invariants, lambda v: (found.append(v), fed_when.append(fed[0])))
    [path] = find_trace_files([trace_dir])
    trace = TraceFile(path)
    checker.feed(trace.header)
    for record in trace.records(expand_snapshots=False):
        fed[0] += 1
        checker.feed(record)
    checker.finish()
    return found, fed_when


def _key(v: dict) -> tuple:
    return v["invariant"], v["step"], v.get("variable", ""), v.get("api", ""), v["message"]


def test_online_verdicts_equal_the_offline_ones_and_come_early(agent_in_process, tmp_path):
    def collect(name: str, *args: str) -> Path:
        return collect_mlp_in_process(agent_in_process, tmp_path, name, *args)

    invariants, _ = infer_invariants([collect("ref", "--steps", "8"),
                                      collect("ref2", "--steps", "6", "--seed", "2")])
    for bug in ("no-zero-grad", "optimizer-over-frozen"):
        run = collect(bug, "--steps", "5", "--bug", bug)
        offline = check_offline(invariants, [run])
        online, fed_when = _online(invariants, run)
        assert offline and sorted(map(_key, online)) == sorted(map(_key, offline))
        total = sum(1 for _ in TraceFile(find_trace_files([run])[0]).records(expand_snapshots=False))
        first = min(range(len(online)), key=lambda i: online[i]["step"])
        assert fed_when[first] < total / 2  # reported while the run was young, not at the end
    clean = collect("clean", "--steps", "4", "--seed", "7")
    assert _online(invariants, clean)[0] == [] == check_offline(invariants, [clean])


def test_a_snapshot_is_judged_at_once_as_one_example_at_a_time(agent_in_process, tmp_path, monkeypatch):
    """The examples of a snapshot are judged together (``violations_in``): the same violations
    in the same order, and the same coverage counts, as judging them one by one."""
    from traincheck_agent.check import online
    from traincheck_agent.inference.coverage import violations_of

    def one_at_a_time(self, examples, report):
        for example in examples:
            for inv in violations_of(self.relation, self.by_key.get(self.relation.key_of(example), ()), example,
                                     self.coverage):
                report({"invariant": inv.id, "relation": inv.relation, **self.relation.violation(inv, example)})

    def collect(name: str, *args: str) -> Path:
        return collect_mlp_in_process(agent_in_process, tmp_path, name, *args)

    invariants, _ = infer_invariants([collect("ref", "--steps", "6")])
    runs = [collect(bug, "--steps", "4", "--bug", bug) for bug in ("no-zero-grad", "optimizer-over-frozen")]
    runs.append(collect("frozen", "--steps", "4", "--freeze-backbone"))  # parameters the reference never froze
    checkers: list[OnlineChecker] = []

    def keep(*args, **kwargs) -> OnlineChecker:
        checkers.append(OnlineChecker(*args, **kwargs))
        return checkers[-1]

    outcomes = []
    for run in runs:
        checkers.clear()
        batched = _online(invariants, run, keep)[0]
        with monkeypatch.context() as patch:
            patch.setattr(online.Watch, "judge", one_at_a_time)
            single = _online(invariants, run, keep)[0]
        assert batched == single
        assert checkers[0].coverage.to_json() == checkers[1].coverage.to_json()
        outcomes.append((len(batched), sum(checkers[0].coverage.outside.values())))
    assert all(found for found, _ in outcomes[:2]) and any(outside for _, outside in outcomes)


def test_examples_judged_once_per_outcome_share_every_verdict(agent_in_process, tmp_path):
    """A relation's ``outcome`` holds all that its verdicts read besides an example's group and
    features (``violations_in`` judges once per triple): over the examples of clean and buggy
    runs, examples that share the triple get the same verdicts under every invariant."""
    from traincheck_agent.inference import relations
    from traincheck_agent.inference.stream import collect_all

    def collect(name: str, *args: str) -> Path:
        return collect_mlp_in_process(agent_in_process, tmp_path, name, *args)

    runs = [collect("ref", "--steps", "6"), collect("frozen", "--steps", "4", "--freeze-backbone")]
    runs += [collect(bug, "--steps", "4", "--bug", bug) for bug in ("no-zero-grad", "optimizer-over-frozen")]
    invariants, _ = infer_invariants(runs[:1])
    with_outcome = [r for r in relations.load(list(relations.MODULES)) if hasattr(r, "outcome")]
    assert {r.RELATION for r in with_outcome} >= {"StateTransition", "GradApplied", "GradCleared"}
    judged_pairs = 0
    for relation in with_outcome:
        watching = [inv for inv in invariants if inv.relation == relation.RELATION]
        assert watching, relation.RELATION
        seen: dict = {}
        for run in runs:
            for key, examples in collect_all([relation], [run])[relation.RELATION].items():
                for example in examples:
                    verdicts = tuple((getattr(relation, "outside", lambda i, e: None)(inv, example),
                                      relation.violates(inv, example))
                                     for inv in watching if relation.invariant_key(inv) == key)
                    triple = (key, example.features, relation.outcome(example))
                    judged_pairs += triple in seen
                    assert seen.setdefault(triple, verdicts) == verdicts, (relation.RELATION, triple)
    assert judged_pairs > 100


def test_a_snapshot_whose_variables_differ_in_outcome_alone_is_judged_per_variable():
    """Two parameters alike in every feature, one that the step changed and one it did not:
    judged together, the unchanged one alone breaks "the step changes the data"."""
    from traincheck_agent.inference.invariant import Invariant
    from traincheck_agent.trace.snapshot import SnapshotBuilder

    def snapshot(when: str, hashes: list[str]) -> dict:
        builder = SnapshotBuilder({"where": f"{when}:optimizer.step", "call": 7, "step": 3, "phase": "train"})
        builder.add_columns(["fc.a", "fc.b"], "Parameter", "model", {
            "dtype": ["float32"] * 2, "shape": [[4]] * 2, "requires_grad": [True] * 2,
            "data": [{"h": h, "zero": False, "nonfinite": False} for h in hashes],
            "grad": [{"h": "g", "zero": False, "nonfinite": False}] * 2})
        return builder.built()

    changes = Invariant("StateTransition", {"event": "optimizer.step", "attribute": "data", "effect": "changed"}, ())
    found: list[dict] = []
    checker = OnlineChecker([changes], found.append)
    checker.feed({"kind": "header", "run_id": "r", "rank": 0})
    checker.feed(snapshot("before", ["a0", "b0"]))
    checker.feed(snapshot("after", ["a1", "b0"]))
    checker.finish()
    assert [v["variable"] for v in found] == ["fc.b"]
    assert checker.coverage.checked == {changes.id: 2}


def test_call_relations_see_only_their_apis_and_judge_as_offline(agent_in_process, tmp_path):
    """Relations whose examples are single calls of one API get only the records of the APIs
    their invariants name (``api_filter``); the verdicts stay those of the offline check."""
    from traincheck_agent.inference import relations

    def collect(name: str, *args: str) -> Path:
        return collect_mlp_in_process(agent_in_process, tmp_path, name, *args)

    invariants, _ = infer_invariants([collect("ref", "--steps", "3", "--init", "normal"),
                                      collect("ref2", "--steps", "3", "--init", "normal", "--seed", "4")])
    filtered = ["ConsistentOutput", "ConsistentInputOutput", "DistinctArgument"]
    assert all(getattr(m, "record_filter", None) is not None for m in relations.load(filtered))
    assert {"ConsistentOutput", "DistinctArgument"} <= {i.relation for i in invariants}
    run = collect("double-init", "--steps", "2", "--bug", "double-init")
    offline = check_offline(invariants, [run])
    online, _ = _online(invariants, run)
    assert any(v["relation"] == "DistinctArgument" for v in online)
    assert sorted(map(_key, online)) == sorted(map(_key, offline))


def test_cross_rank_relations_are_left_to_the_exchange():
    from traincheck_agent.inference.invariant import Invariant

    inv = Invariant("CrossRankConsistent", {"event": "after:optimizer.step", "attribute": "data"}, ())
    checker = OnlineChecker([inv], lambda v: None)
    assert checker.skipped_relations == ["CrossRankConsistent"] and checker.relations == []


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_single_process_checker_loads_no_cross_rank_machinery():
    """Digests and the store exchange serve runs of several ranks: a one-rank run's checker, even
    with cross-rank invariants loaded, never imports them (a two-rank one does)."""
    def checker_modules(world_size: int) -> str:
        script = (
            "import sys\n"
            "from traincheck_agent.check.online import OnlineChecker\n"
            "from traincheck_agent.inference.invariant import Invariant\n"
            "inv = Invariant('CrossRankConsistent', {'event': 'after:optimizer.step', 'attribute': 'data'}, ())\n"
            "checker = OnlineChecker([inv], print, exchange=lambda run, restart: None)\n"
            f"checker.feed({{'kind': 'header', 'run_id': 'r', 'rank': 0, 'world_size': {world_size}}})\n"
            "checker.finish()\n"
            "print(sorted(m for m in sys.modules if m.startswith('traincheck_agent.check.')))\n"
        )
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip().splitlines()[-1]

    single, pair = checker_modules(1), checker_modules(2)
    for module in ("cross_rank_checks", "rank_summary", "rank_exchange"):
        assert f"traincheck_agent.check.{module}" not in single, single
        assert f"traincheck_agent.check.{module}" in pair, pair


def test_collectors_skip_only_examples_no_invariant_watches(agent_in_process, tmp_path):
    """A checker tells each collector the example keys its invariants watch; the collectors
    that skip the others (EventContain, ContextArgument, StateTransition, VarPeriodicChange)
    still build every watched example, the same as a collector that builds them all."""
    from traincheck_agent.inference import relations
    from traincheck_agent.inference.stream import TraceSource

    run = collect_mlp_in_process(agent_in_process, tmp_path, "ref", "--steps", "3")
    [path] = find_trace_files([run])
    trace = TraceFile(path)
    records = list(trace.records())
    for relation in relations.load(["EventContain", "ContextArgument", "StateTransition", "VarPeriodicChange"]):
        every = relation.Collector(TraceSource.of(trace))
        all_examples = [e for r in records for e in every.feed(r)] + list(every.finish())
        keys = sorted({relation.key_of(e) for e in all_examples})
        assert len(keys) >= 2, relation.RELATION
        watched = frozenset(keys[::2])
        only = relation.Collector(TraceSource.of(trace))
        only.wanted = watched
        some = [e for r in records for e in only.feed(r)] + list(only.finish())
        assert some == [e for e in all_examples if relation.key_of(e) in watched], relation.RELATION
        assert len(some) < len(all_examples)

    invariants, _ = infer_invariants([run])
    checker = OnlineChecker(invariants, lambda v: None)
    checker.feed(trace.header)
    assert all(w.collector.wanted == frozenset(w.by_key) for w in checker._watches)


def test_transition_features_keep_the_type_of_each_descriptive_value():
    """A descriptive value reaches the example's features as it was recorded: ``True`` and ``1``
    compare and hash alike but must stay two features (a precondition may have been learned on
    either), whatever the collector keeps between records."""
    from traincheck_agent.inference.examples import TransitionCollector, _features
    from traincheck_agent.inference.stream import TraceSource

    collector = TransitionCollector(TraceSource("t", "r", 0))
    fp = {"h": "x3:0", "zero": False, "nonfinite": False, "amax": 1.0}
    seen = []
    for call, flag in enumerate([True, 1, True, 1.0]):
        attrs = {"dtype": "float32", "tensor_model_parallel": flag, "grad": fp}
        before = {"kind": "state", "where": "before:backward", "call": call, "var": "w", "vtype": "Parameter",
                  "step": call, "phase": "train", "attrs": attrs}
        collector.feed(before)
        after = dict(before, where="after:backward", attrs=dict(attrs, grad=dict(fp, h=f"x3:{call + 1}")))
        [example] = collector.feed(after)  # backward moved the grad: it touched the variable
        assert example.features == _features("Parameter", "train", call, after["attrs"], {"grad": "nonzero"}, True)
        value = dict(example.features)["tensor_model_parallel"]
        seen.append((type(value), value))
    assert seen == [(bool, True), (int, 1), (bool, True), (float, 1.0)]
