"""torch.compile under the agent: a compiled model trains under collect and check modes with the
same results and the same dynamo figures (graph breaks, recompiles, frames) as without the agent;
calls inside the compiled region are not recorded, and the agent says so once.

Compiling is slow on small machines, so the runs are shared by the tests of this module and run
two at a time.
"""

from __future__ import annotations

import json

import pytest
from conftest import PIPELINES, agent_env, read_traces, run_parallel

from traincheck_agent.agent.record.compiled_regions import NOTICE
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import read_invariants, write_invariants

# Every test here starts Python child processes (real training under the agent, launchers, the
# startup hook, the CLI): the slow tier.
pytestmark = pytest.mark.slow

COMPILE = str(PIPELINES / "compile_train.py")
STEPS = 4
NOTICE_LINE = f"[traincheck] warning: {NOTICE}"
TIMEOUT = 400  # inductor compiles C++ on the first call
# The compiled module's call is recorded as the call of the model it compiles.
MODEL_CALL = "__main__.Net.forward"


def _result(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _agent_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("[traincheck]")]


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> dict:
    """The compiled pipeline (inductor) plain and under collect mode, with the same seed."""
    out = tmp_path_factory.mktemp("compile") / "trace"
    args = [COMPILE, "--steps", str(STEPS), "--seed", "1"]
    plain, collect = run_parallel((args, agent_env(None, None)), (args, agent_env("collect", out)), timeout=TIMEOUT)
    return {"plain": plain, "collect": collect, "out": out}


def test_collect_mode_trains_the_compiled_model_unchanged(collected):
    plain, collect = _result(collected["plain"]), _result(collected["collect"])
    assert collect["losses"] == plain["losses"] and len(plain["losses"]) == STEPS
    assert collect["eval_loss"] == plain["eval_loss"] and collect["checksum"] == plain["checksum"]
    # The same compilation: no graph break or recompile added, no extra frame compiled.
    assert collect["dynamo"] == plain["dynamo"]
    assert plain["dynamo"]["graph_breaks"] == 0 and plain["dynamo"]["frames_ok"] >= 1


def test_the_compiled_region_is_said_once_and_left_unrecorded(collected):
    assert _agent_lines(collected["collect"].stderr) == [NOTICE_LINE]
    assert "[traincheck]" not in collected["plain"].stderr
    [trace] = read_traces(collected["out"])
    # The compiled module's call is recorded, once per forward (train steps + the eval pass) ...
    compiled = trace.calls(MODEL_CALL)
    assert [c["step"] for c in compiled] == [*range(STEPS), STEPS]
    # ... and nothing that ran inside it: neither the model's modules nor the compiled graphs.
    inside = {c["id"] for c in compiled}
    assert [c["api"] for c in trace.calls() if c["parent"] in inside] == []
    forwards = {c["api"] for c in trace.calls() if c["api"].endswith(".forward")}
    assert forwards == {MODEL_CALL}


def test_the_training_loop_around_the_compiled_model_is_recorded(collected):
    [trace] = read_traces(collected["out"])
    for api in ("torch.optim.SGD.step", "torch.optim.Optimizer.zero_grad", "torch.Tensor.backward",
                "torch.nn.functional.cross_entropy"):
        assert [c["step"] for c in trace.calls(api)][:STEPS] == list(range(STEPS)), api
    var = "model.head.weight"  # the user's names, not the compiled wrapper's (_orig_mod)
    before = trace.states("before:optimizer.step", var)
    after = trace.states("after:optimizer.step", var)
    assert [s["step"] for s in before] == [s["step"] for s in after] == list(range(STEPS))
    assert all(b["attrs"]["data"] != a["attrs"]["data"] for b, a in zip(before, after, strict=True))
    assert [s["step"] for s in trace.states("after:backward", var)] == list(range(STEPS))


def test_check_mode_on_a_compiled_run_with_compiled_invariants(collected, tmp_path):
    """Invariants learned from the compiled reference (seed 1) hold for a compiled run with
    another seed: nothing in them depends on what ran inside the compiled region."""
    invariants, files = infer_invariants([collected["out"]])
    inv = tmp_path / "inv.json"
    write_invariants(invariants, inv, [str(f) for f in files])
    apis = {i.subject.get("api") for i in read_invariants(inv)}
    assert MODEL_CALL in apis  # the compiled call is itself checked
    assert len(invariants) >= 10

    out = tmp_path / "check"
    args = [COMPILE, "--steps", str(STEPS), "--seed", "0"]
    checked, plain = run_parallel((args, agent_env("check", out, TRAINCHECK_INV=str(inv))),
                                  (args, agent_env(None, None)), timeout=TIMEOUT)
    result, expected = _result(checked), _result(plain)
    assert result["losses"] == expected["losses"] and result["dynamo"] == expected["dynamo"]
    notice, summary = _agent_lines(checked.stderr)
    assert notice == NOTICE_LINE
    assert summary.startswith(f"[traincheck] check summary (rank 0): no violations ({len(invariants)} invariants")
    violations = out / "violations-0.jsonl"
    assert not violations.exists() or not violations.read_text().strip()


def test_a_graph_break_in_the_model_stays_a_graph_break(tmp_path):
    """A model whose forward breaks the graph: the agent adds no break reason of its own and no
    storm. It does add one break per compilation, at its wrapper around the model's call (the
    frame dynamo starts from), where torch alone starts at the model's forward."""
    out = tmp_path / "trace"
    # aot_eager runs each compiled graph as a module call of its own: not the model's either.
    args = [COMPILE, "--steps", "3", "--graph-break", "--backend", "aot_eager"]
    plain, collect = run_parallel((args, agent_env(None, None)), (args, agent_env("collect", out)), timeout=TIMEOUT)
    expected, result = _result(plain), _result(collect)
    assert result["losses"] == expected["losses"] and result["checksum"] == expected["checksum"]
    compilations = expected["dynamo"]["unique_graphs"] // 2  # train and eval: two graphs each
    assert expected["dynamo"]["graph_breaks"] == compilations == 2
    assert result["dynamo"]["break_reasons"] == expected["dynamo"]["break_reasons"]
    assert len(result["dynamo"]["break_reasons"]) == 1
    assert result["dynamo"]["graph_breaks"] == expected["dynamo"]["graph_breaks"] + compilations
    assert result["dynamo"]["recompiles"] == expected["dynamo"]["recompiles"]
    assert result["dynamo"]["unique_graphs"] == expected["dynamo"]["unique_graphs"]
    assert _agent_lines(collect.stderr) == [NOTICE_LINE]
    [trace] = read_traces(out)
    compiled = {c["id"] for c in trace.calls(MODEL_CALL)}
    assert len(compiled) == 4
    assert [c["api"] for c in trace.calls() if c["parent"] in compiled] == []


def test_invariants_learned_without_compiling_hold_for_the_compiled_run_and_back(collected, tmp_path):
    """A reference collected without torch.compile checks a compiled run clean, and the compiled
    reference checks an uncompiled run clean: the model's call has the same name either way, and
    what the compiled run leaves unrecorded is never required by an invariant."""
    eager_ref = tmp_path / "eager_ref"
    [proc] = run_parallel(([COMPILE, "--steps", str(STEPS), "--seed", "2", "--no-compile"],
                           agent_env("collect", eager_ref)), timeout=TIMEOUT)
    _result(proc)
    files = {}
    for name, ref in (("eager", eager_ref), ("compiled", collected["out"])):
        invariants, sources = infer_invariants([ref])
        files[name] = tmp_path / f"{name}.json"
        write_invariants(invariants, files[name], [str(f) for f in sources])
    compiled_run, eager_run = run_parallel(
        ([COMPILE, "--steps", str(STEPS), "--seed", "0"],
         agent_env("check", tmp_path / "c", TRAINCHECK_INV=str(files["eager"]))),
        ([COMPILE, "--steps", str(STEPS), "--seed", "0", "--no-compile"],
         agent_env("check", tmp_path / "e", TRAINCHECK_INV=str(files["compiled"]))), timeout=TIMEOUT)
    for proc, out in ((compiled_run, tmp_path / "c"), (eager_run, tmp_path / "e")):
        _result(proc)
        assert "no violations" in proc.stderr, proc.stderr
        # At most the stats record of examples outside the reference's domain, never a violation.
        log = out / "violations-0.jsonl"
        lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        assert all(r.get("event") == "coverage" for r in lines), lines
