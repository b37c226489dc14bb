"""A tensor the agent cannot fingerprint is undecided, never a pass or a failure.

Its state records carry a marker instead of a hash; two markers are equal whatever the data, so
comparing them would say "the step did not change the data" at every step. The checks count such
examples as not covered ("no fingerprint") instead.
"""

from __future__ import annotations

import pytest
from conftest import PIPELINES, agent_env, run_python

from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import write_invariants

# Every test here starts Python child processes (real training under the agent, launchers, the
# startup hook, the CLI): the slow tier.
pytestmark = pytest.mark.slow

OPAQUE = str(PIPELINES / "opaque_param_train.py")


def test_a_parameter_without_a_fingerprint_is_not_a_violation(tmp_path):
    ref = tmp_path / "ref"
    collect = run_python([OPAQUE], agent_env("collect", ref))
    assert collect.returncode == 0, collect.stderr
    invariants, files = infer_invariants([ref])
    relations = {inv.relation for inv in invariants}
    assert {"StateTransition", "GradApplied"} <= relations, relations
    inv = tmp_path / "inv.json"
    write_invariants(invariants, inv, [str(f) for f in files])

    check = run_python([OPAQUE, "--opaque"], agent_env("check", tmp_path / "check", TRAINCHECK_INV=str(inv)))
    assert check.returncode == 0, check.stderr
    [summary] = [line for line in check.stderr.splitlines() if "check summary" in line]
    assert "no violations" in summary and "no fingerprint for optimizer.step" in summary, check.stderr
    assert not list((tmp_path / "check").glob("violations-*.jsonl")) or not any(
        line.strip() and '"event":"coverage"' not in line.replace(" ", "")
        for p in (tmp_path / "check").glob("violations-*.jsonl") for line in p.read_text().splitlines())


def test_a_rank_without_a_fingerprint_does_not_break_cross_rank_equality(tmp_path):
    # Rank 1 cannot hash one replicated parameter: its marker is neither equal nor unequal to
    # rank 0's hash, so "equal on every rank" is undecided there, never a violation.
    torchrun = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", OPAQUE]
    ref = tmp_path / "ref"
    collect = run_python(torchrun, agent_env("collect", ref, OMP_NUM_THREADS="1"))
    assert collect.returncode == 0, collect.stderr
    invariants, files = infer_invariants([ref])
    cross = [i for i in invariants if i.relation == "CrossRankConsistent"]
    assert cross, sorted({i.relation for i in invariants})
    inv = tmp_path / "inv.json"
    write_invariants(cross, inv, [str(f) for f in files])

    out = tmp_path / "check"
    check = run_python([*torchrun, "--opaque-rank", "1"],
                       agent_env("check", out, TRAINCHECK_INV=str(inv), OMP_NUM_THREADS="1"))
    assert check.returncode == 0, check.stderr
    summaries = [line for line in check.stderr.splitlines() if "check summary" in line]
    assert len(summaries) == 2 and all("no violations" in line for line in summaries), check.stderr
    assert any("no fingerprint" in line for line in summaries), check.stderr
