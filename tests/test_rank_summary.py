"""The per-step summary ranks publish instead of their cross-rank halves: agreeing ranks settle
by digest, anything else makes the comparer fetch the halves."""

from __future__ import annotations

from dataclasses import replace

import orjson
import torch.distributed as dist

from traincheck_agent.check.cross_rank_checks import CrossRankChecks
from traincheck_agent.check.online import Watch
from traincheck_agent.check.rank_exchange import StoreExchange
from traincheck_agent.check.rank_summary import disagree, summarize
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import Clause
from traincheck_agent.inference.relations import cross_rank, cross_rank_values

DP = "size2/stride2"
EQUAL_DATA = Invariant("CrossRankConsistent", {"event": "after:optimizer.step", "attribute": "data"},
                       (Clause("tensor_model_parallel", False),))
EQUAL_IN_DP = Invariant("CrossRankConsistent", {"event": "after:optimizer.step", "attribute": "data", "group": DP}, ())
DISTINCT_BATCH = Invariant("CrossRankValue", {"api": "next", "position": "ret", "form": "distinct"}, ())


def _snapshot(rank: int, var: str, digest: str, sharded: bool) -> cross_rank.RankSnapshot:
    groups = ((DP, (rank % 2, rank % 2 + 2)),)
    features = (("phase", "train"), ("tensor_model_parallel", sharded), ("vtype", "Parameter"))
    return cross_rank.RankSnapshot("run", "after:optimizer.step", var, 3, 0, "data", rank, digest, features, groups)


def _halves(rank: int, norm: str = "n", shard: str | None = None, batch: str | None = None) -> dict:
    halves = {"CrossRankConsistent": [_snapshot(rank, "norm.weight", norm, False),
                                      _snapshot(rank, "shard.weight", shard or f"s{rank % 2}", True)]}
    if batch is not None:
        halves["CrossRankValue"] = [cross_rank_values.RankValue("run", "next", 3, 0, "ret", rank, batch, "train")]
    return halves


WATCHES = {"CrossRankConsistent": Watch(cross_rank, [EQUAL_DATA, EQUAL_IN_DP]),
           "CrossRankValue": Watch(cross_rank_values, [DISTINCT_BATCH])}


def _digests(rank: int, **kw) -> dict[str, str]:
    return summarize(_halves(rank, **kw), WATCHES).digests


def test_scopes_follow_the_invariants_and_their_preconditions():
    summary = summarize(_halves(1, batch="b1"), WATCHES)
    # The replicated weight is in the world's digest and its data-parallel group's; the shard only
    # in its group's (its precondition rules out the world's invariant).
    assert set(summary.digests) == {"world", f"{DP}@1,3"}
    assert [h.var for h in summary.digested["CrossRankConsistent"]] == ["norm.weight", "shard.weight"]
    # Batches must differ across ranks: agreement settles nothing, so they go in full.
    assert [h.digest for h in summary.direct["CrossRankValue"]] == ["b1"]


def test_agreeing_ranks_settle_by_digest():
    own = _digests(0)
    others = {r: _digests(r) for r in (1, 2, 3)}
    assert not disagree(own, others, 0)  # shards differ across groups, never within one


def test_any_disagreement_in_a_scope_is_seen():
    own = _digests(0)
    drifted_shard = {1: _digests(1), 2: _digests(2), 3: _digests(3, shard="other")}
    assert disagree(own, drifted_shard, 0)
    drifted_norm = {1: _digests(1, norm="x"), 2: _digests(2), 3: _digests(3)}
    assert disagree(own, drifted_norm, 0)


def test_a_rank_without_a_scope_the_others_have_disagrees():
    own = _digests(0)
    others = {1: _digests(1), 2: _digests(2), 3: {"world": _digests(3)["world"]}}
    assert disagree(own, others, 0)
    # A rank that published nothing (reported missing) is left out, not counted as a mismatch.
    assert not disagree(own, {1: _digests(1), 2: _digests(2)}, 0)


class _StoreWithoutAppend(dist.Store):
    """A store that predates ``append`` (set / get / check only)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, bytes] = {}

    def set(self, key, value):
        self.values[key] = value

    def get(self, key):
        return self.values[key]

    def check(self, keys):
        return all(k in self.values for k in keys)


def _cross_rank_of(store, rank: int) -> CrossRankChecks:
    watches = [Watch(cross_rank, [EQUAL_DATA, EQUAL_IN_DP])]
    return CrossRankChecks(watches, lambda run, restart: StoreExchange(store, rank, 4, run, restart))


def test_a_rank_appends_its_summary_and_sends_its_halves_when_asked():
    store = dist.HashStore()
    crossing = _cross_rank_of(store, 1)
    crossing.run_id = "run"
    for half in _halves(1)["CrossRankConsistent"]:
        crossing.add("CrossRankConsistent", half)
    crossing.steps_complete(before=4, report=lambda v: None)
    summary = orjson.loads(store.get("traincheck/run/0/3/summary"))
    assert summary["r"] == 1 and set(summary["s"]) == {"world", f"{DP}@1,3"}
    assert not store.check(["traincheck/run/0/3/details"]) and list(crossing.held) == [3]
    StoreExchange(store, 0, 4, "run").request_details(3)
    crossing.steps_complete(before=5, report=lambda v: None)  # the rank's next step: it reads the request
    details = orjson.loads(store.get("traincheck/run/0/3/details"))
    assert [h[2] for h in details["h"]["CrossRankConsistent"]] == ["norm.weight", "shard.weight"]
    assert crossing.held == {}


def test_a_rank_holds_its_newest_steps_within_a_bound_of_halves():
    from traincheck_agent.check import cross_rank_checks

    crossing = _cross_rank_of(dist.HashStore(), 1)
    for step in range(100):
        crossing._hold(step, {"CrossRankConsistent": [object()] * 10})
    assert sorted(crossing.held) == list(range(100 - cross_rank_checks.MAX_HELD_STEPS, 100))
    big = cross_rank_checks.MAX_HELD_HALVES // 2 + 1
    for step in range(100, 104):
        crossing._hold(step, {"CrossRankConsistent": [object()] * big})
    assert sorted(crossing.held) == [102, 103]  # the last two steps, whatever their size


def test_a_store_that_fails_switches_cross_rank_checks_off_with_one_warning(capsys):
    crossing = _cross_rank_of(_StoreWithoutAppend(), 1)
    for step in (3, 4):
        for half in _halves(1)["CrossRankConsistent"]:
            crossing.add("CrossRankConsistent", replace(half, step=step))
        crossing.steps_complete(before=step + 1, report=lambda v: None)
    assert crossing.broken and not crossing.halves
    err = capsys.readouterr().err
    assert err.count("the cross-rank exchange failed") == 1
    assert "cross-rank invariants are not checked for the rest of the run" in err
