"""The agent's tensor work is invisible to the user's op counters: a dispatch mode active around
the loop and a tensor subclass's ``__torch_function__`` count the same calls with the agent in
collect and in check mode as without it."""

from __future__ import annotations

import json

import pytest
from conftest import PIPELINES, agent_env, run_parallel

from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import write_invariants

# Every test here starts Python child processes (real training under the agent, launchers, the
# startup hook, the CLI): the slow tier.
pytestmark = pytest.mark.slow

COUNTING = str(PIPELINES / "op_counting_train.py")


def _counts(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_op_counters_see_the_same_calls_with_the_agent(tmp_path):
    plain, collect = run_parallel(([COUNTING], agent_env(None, None)),
                                  ([COUNTING], agent_env("collect", tmp_path / "ref")))
    invariants, files = infer_invariants([tmp_path / "ref"])
    assert invariants  # the check below has something to judge
    write_invariants(invariants, tmp_path / "inv.json", [str(f) for f in files])
    [check] = run_parallel(([COUNTING], agent_env("check", tmp_path / "check", TRAINCHECK_INV=str(tmp_path / "inv.json"))))
    assert _counts(collect) == _counts(plain) == _counts(check)
