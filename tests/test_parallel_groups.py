"""Cross-rank invariants within process groups: 4 CPU ranks as 2-way data x 2-way tensor
parallelism (groups made with ``new_group``), collected, inferred and checked offline and online."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import PIPELINES, agent_env, run_python

from traincheck_agent.check.offline import check_offline
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import write_invariants
from traincheck_agent.inference.relations.cross_rank import _odd_ranks
from traincheck_agent.trace.groups import WORLD, describe_family, family_of

DP = "size2/stride2"  # data-parallel groups {0, 2}, {1, 3}
TP = "size2/stride1"  # tensor-parallel groups {0, 1}, {2, 3}


def _torchrun(out: Path, mode: str, *args: str, **env: str) -> Path:
    cmd = ["-m", "torch.distributed.run", "--nproc_per_node=4", "--standalone", str(PIPELINES / "tp_train.py"),
           "--tp", "2", *args]
    proc = run_python(cmd, agent_env(mode, out, OMP_NUM_THREADS="1", **env))
    assert proc.returncode == 0, proc.stderr
    out.mkdir(parents=True, exist_ok=True)
    (out / "stderr.txt").write_text(proc.stderr)
    return out


def test_family_names_follow_the_layout():
    assert family_of([2, 3]) == family_of([0, 1]) == TP
    assert family_of([3, 1]) == DP and family_of([0, 4, 8, 12]) == "size4/stride4"
    assert family_of([0, 3, 4]) == "ranks:0,3,4"
    assert describe_family(WORLD) == "every rank"
    assert describe_family(DP) == "every rank of its process group (2 ranks 2 apart)"
    assert describe_family(TP) == "every rank of its process group (2 consecutive ranks)"


def test_the_odd_rank_is_named_only_when_most_ranks_agree():
    assert _odd_ranks({0: "a", 1: "b", 2: "b", 3: "b"}) == (0,)
    assert _odd_ranks({0: "a", 1: "b"}) == ()  # no majority between two
    assert _odd_ranks({0: "a", 1: "a", 2: "b", 3: "b"}) == ()
    assert _odd_ranks({0: "a", 1: "a"}) == ()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("groups")
    trace = _torchrun(root / "ref", "collect")
    invariants, files = infer_invariants([trace])
    inv_file = root / "inv.json"
    write_invariants(invariants, inv_file, [str(f) for f in files])
    return root, trace, invariants, inv_file


def _cross_rank(invariants):
    return {(i.subject["event"], i.subject["attribute"], i.subject.get("group", WORLD)): i
            for i in invariants if i.relation == "CrossRankConsistent"}


@pytest.mark.slow
def test_groups_are_recorded_and_invariants_learned_per_family(reference):
    _, trace, invariants, _ = reference
    for f in sorted(trace.glob("trace_*.jsonl")):  # each rank: once its groups exist, both of them
        records = [json.loads(line) for line in f.read_text().splitlines()]
        groups = [r["groups"] for r in records if r["kind"] == "groups"]
        assert any(sorted(g["family"] for g in found) == [TP, DP] for found in groups)
    found = _cross_rank(invariants)
    world = found[("after:optimizer.step", "data", WORLD)]
    assert [c.text() for c in world.precondition] == ["tensor_model_parallel = False"]
    data_parallel = found[("after:optimizer.step", "data", DP)]
    assert data_parallel.precondition == () and data_parallel.support["variables"] == 4  # shards too
    # Within a tensor-parallel group only the replicated parameters agree: the world's
    # invariant already says so, and no TP-family copy of it is kept.
    assert not [key for key in found if key[2] == TP]


@pytest.mark.slow
def test_a_shard_drifting_from_its_data_parallel_replica_is_caught_offline(reference):
    root, _, invariants, _ = reference
    bug = _torchrun(root / "unscaled", "collect", "--bug", "unscaled-shard-grad")
    violations = [v for v in check_offline(invariants, [bug]) if v["relation"] == "CrossRankConsistent"]
    first = [v for v in violations if v["step"] == 0]
    assert first and {v["variable"] for v in first} == {"model.1.weight", "model.1.bias"}
    assert all(v["ranks"] == [1, 3] for v in violations)  # never one shard against another
    assert "2 ranks 2 apart" in first[0]["message"]


@pytest.mark.slow
def test_the_bloom_failure_names_the_odd_rank(reference):
    root, _, invariants, _ = reference
    bug = _torchrun(root / "clip", "collect", "--bug", "clip-on-one-rank")
    world = [v for v in check_offline(invariants, [bug])
             if v["relation"] == "CrossRankConsistent" and v["ranks"] == [0, 1, 2, 3] and v["step"] == 0]
    assert {v["variable"] for v in world} == {"model.0.weight", "model.0.bias"}
    assert all(v["odd_ranks"] == [0] for v in world)
    assert "on rank(s) [0] differs from ranks [1, 2, 3]" in world[0]["message"]


@pytest.mark.slow
def test_online_check_within_groups_and_a_clean_run(reference):
    root, _, invariants, inv_file = reference
    out = _torchrun(root / "online", "check", "--bug", "unscaled-shard-grad", TRAINCHECK_INV=str(inv_file),
                    TRAINCHECK_DEBUG="1")
    found = [v for line in (out / "violations-0.jsonl").read_text().splitlines()
             if (v := json.loads(line)).get("event") != "coverage"]
    cross = [v for v in found if v["relation"] == "CrossRankConsistent"]
    assert min(v["step"] for v in cross) == 0
    assert {tuple(v["ranks"]) for v in cross} == {(1, 3)}
    assert all(v["evidence"]["subject"].get("group") == DP for v in cross)
    clean = _torchrun(root / "online_clean", "check", "--steps", "4", TRAINCHECK_INV=str(inv_file),
                      TRAINCHECK_DEBUG="1")
    assert not list(clean.glob("violations-*.jsonl")) or all(
        not p.read_text().strip() for p in clean.glob("violations-*.jsonl"))
    # The ranks' summaries agree in the clean run: the comparer never fetched their halves.
    assert _details_fetched(clean) == 0 and _details_fetched(out) > 0


def _details_fetched(out: Path) -> int:
    found = re.search(r"cross-rank exchange, rank 0: .*details fetched for (\d+) steps", (out / "stderr.txt").read_text())
    assert found, "the comparer's exchange figures are missing"
    return int(found.group(1))


@pytest.mark.slow
def test_tensor_parallel_ranks_loading_different_batches_are_caught(reference):
    """Ranks of a tensor-parallel group must load the same batch and data-parallel groups
    different ones: two invariants of two families, where the world has neither."""
    root, _, invariants, _ = reference
    batches = {(i.subject["form"], i.subject.get("group", WORLD)) for i in invariants
               if i.relation == "CrossRankValue" and i.subject["position"] == "ret.items[0]"}
    assert batches == {("equal", TP), ("distinct", DP)}
    bug = _torchrun(root / "sampler", "collect", "--bug", "sampler-by-global-rank")
    violations = [v for v in check_offline(invariants, [bug]) if v["relation"] == "CrossRankValue"]
    first = [v for v in violations if v["step"] == -1]  # the very first batch
    assert sorted(v["ranks"] for v in first) == [[0, 1], [2, 3]]
    assert {v["relation"] for v in check_offline(invariants, [bug])} == {"CrossRankValue"}


@pytest.mark.slow
def test_groups_of_a_device_mesh_are_the_same_families(reference):
    """The same layout made by ``init_device_mesh``: its groups are recorded with their mesh
    dimension and checked against the invariants learned from ``new_group``'s."""
    root, _, invariants, _ = reference
    mesh = _torchrun(root / "mesh", "collect", "--mesh", "--steps", "4")
    for f in sorted(mesh.glob("trace_*.jsonl")):
        records = [json.loads(line) for line in f.read_text().splitlines()]
        found = [{(g["family"], g.get("desc")) for g in r["groups"]} for r in records if r["kind"] == "groups"]
        assert {(TP, "mesh_tp"), (DP, "mesh_dp")} in found
    assert check_offline(invariants, [mesh]) == []


@pytest.mark.slow
def test_inference_from_a_subset_of_the_ranks(reference):
    """Traces of one group only say nothing about the world: inferring from ranks 0 and 1 (a
    tensor-parallel group) gives that family's invariants, which the whole run satisfies."""
    _, trace, _, _ = reference
    subset, files = infer_invariants([trace], ranks={0, 1})
    assert len(files) == 2
    families = {i.subject.get("group", WORLD) for i in subset if i.relation.startswith("CrossRank")}
    assert families == {TP}
    assert check_offline(subset, [trace]) == []
    data_parallel, _ = infer_invariants([trace], ranks={0, 2})
    assert {i.subject.get("group", WORLD) for i in data_parallel if i.relation.startswith("CrossRank")} == {DP}
    assert check_offline(data_parallel, [trace]) == []
