"""Check mode end to end: invariants learned from a clean collect run, then real training runs
(unchanged scripts, child processes) checked online under TRAINCHECK_MODE=check."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import (
    PIPELINES,
    agent_env,
    collect_in_process,
    plain_losses,
    read_traces,
    run_parallel,
    run_python,
)

from traincheck_agent.agent.checking.check_mode import ABORT_EXIT_STATUS
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import read_invariants, write_invariants

# Every test here starts Python child processes (real training under the agent, launchers, the
# startup hook, the CLI): the slow tier.
pytestmark = pytest.mark.slow

MLP = str(PIPELINES / "mlp_train.py")


def _losses(stdout: str) -> list[float]:
    return json.loads(stdout.strip().splitlines()[-1])["losses"]


def _lines(out: Path, rank: int = 0) -> list[dict]:
    path = out / f"violations-{rank}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _violations(out: Path, rank: int = 0) -> list[dict]:
    """The violation records (the stats record of what was not covered left out)."""
    return [r for r in _lines(out, rank) if r.get("event") != "coverage"]


def _subject_id(invariants_file: Path, event: str, attribute: str, effect: str) -> str:
    [inv] = [i for i in read_invariants(invariants_file) if i.relation == "StateTransition"
             and (i.subject["event"], i.subject["attribute"], i.subject["effect"]) == (event, attribute, effect)]
    return inv.id


@pytest.fixture(scope="module")
def inv(tmp_path_factory) -> Path:
    """Invariants of two clean MLP references (one with a frozen backbone, as in
    test_inference), in a file."""
    root = tmp_path_factory.mktemp("reference")
    refs = [root / "ref", root / "frozen"]
    collect_in_process(MLP, refs[0], "--steps", "10")
    collect_in_process(MLP, refs[1], "--steps", "8", "--freeze-backbone")
    invariants, files = infer_invariants(refs)
    path = root / "inv.json"
    write_invariants(invariants, path, [str(f) for f in files])
    return path


def check(tmp_path: Path, name: str, inv_files: str, *args: str, **env: str):
    out = tmp_path / name
    proc = run_python([MLP, *args], agent_env("check", out, TRAINCHECK_INV=inv_files, **env))
    return proc, out


def check_and_plain(tmp_path: Path, name: str, inv_files: str, *args: str, **env: str):
    """A check run, and the same run without the agent, whose losses it must reproduce."""
    out = tmp_path / name
    proc = run_python([MLP, *args], agent_env("check", out, TRAINCHECK_INV=inv_files, **env))
    assert proc.returncode == 0, proc.stderr
    assert _losses(proc.stdout) == plain_losses(*args)  # the agent changes nothing
    return proc, out


def test_optimizer_over_frozen_parameters_is_caught_at_step_0(inv, tmp_path):
    proc, out = check_and_plain(tmp_path, "frozen", str(inv), "--steps", "4", "--bug", "optimizer-over-frozen")
    [applied] = [i.id for i in read_invariants(inv)
                 if i.relation == "GradApplied" and i.subject["effect"] == "applies_every_grad"]
    caught = [v for v in _violations(out) if v["invariant"] == applied]
    assert caught and min(v["step"] for v in caught) == 0
    assert {v["variable"] for v in caught if v["step"] == 0} == {"model.head.weight", "model.head.bias"}
    assert all(v["severity"] == "ERROR" for v in caught)
    assert re.search(r"\[traincheck\] violation at rank 0 step 0: parameters with a grad were never changed by an "
                     r"optimizer step on model\.head\.\w+; expected every parameter that backward gives a non-zero grad "
                     r"is changed by an optimizer step", proc.stderr)
    summary = re.search(r"\[traincheck\] check summary \(rank 0\): \d+ violations of \d+ invariants.*", proc.stderr)
    assert summary
    # The frozen backbone in the optimizer is a context no reference showed zero_grad: counted.
    assert re.search(r"\d+ of \d+ examples checked, \d+ outside the references' domain "
                     r"\(requires_grad=False never seen for zero_grad", summary[0])
    [stats] = [r for r in _lines(out) if r.get("event") == "coverage"]
    assert stats["attributes"]["traincheck.examples_not_covered"] > 0
    assert not list(out.glob("trace_*.jsonl"))  # check mode writes no trace unless asked


def test_forgotten_zero_grad_is_caught_at_step_1(inv, tmp_path):
    proc, out = check_and_plain(tmp_path, "no_zero_grad", str(inv), "--steps", "4", "--bug", "no-zero-grad",
                                TRAINCHECK_ACTION="explode")
    # A bad action is one warning, and the default (log) applies.
    assert "[traincheck] warning: TRAINCHECK_ACTION='explode' is not one of log, raise, abort; using log" in proc.stderr
    violations = _violations(out)
    finds_zero = _subject_id(inv, "backward", "grad", "finds_none_or_zero")
    stale = [v for v in violations if v["invariant"] == finds_zero]
    assert stale and min(v["step"] for v in stale) == 1  # step 0 had no stale grads yet
    assert len({v["variable"] for v in stale if v["step"] == 1}) == 6
    sequence = [v for v in violations if v["relation"] == "APISequence"]
    assert [v["step"] for v in sequence] == [1, 2, 3]
    assert all(v["api"] == "torch.optim.Optimizer.zero_grad" for v in sequence)
    # And each step from step 1 on applies the stale grads of all six parameters.
    applied = [v for v in violations if v["relation"] == "GradCleared"]
    assert sorted(v["step"] for v in applied) == [1] * 6 + [2] * 6 + [3] * 6
    summary = [line for line in proc.stderr.splitlines() if "check summary" in line]
    assert summary == [f"[traincheck] check summary (rank 0): {len(violations)} violations of 3 invariants "
                       f"({applied[0]['invariant']} x{len(applied)}, {finds_zero} x{len(stale)}, "
                       f"{sequence[0]['invariant']} x3); "
                       f"{len(read_invariants(inv))} invariants checked; details in {out / 'violations-0.jsonl'}; "
                       f"likely cause first (1 group): backward found grads left over from an earlier step on "
                       f"6 of 6 parameters of `model` at step 1, again up to step 3 (hint: grads were not cleared "
                       f"before backward: is `optimizer.zero_grad()` called every step?)"]


@pytest.mark.parametrize("args", [
    ("--steps", "7", "--optimizer", "sgd", "--seed", "3", "--lr", "0.005"),
    ("--steps", "4", "--accumulate", "4", "--seed", "2"),
])
def test_clean_variants_report_nothing(inv, tmp_path, args):
    proc, out = check_and_plain(tmp_path, "clean", str(inv), *args)
    assert _violations(out) == []
    assert "[traincheck] violation" not in proc.stderr
    assert "[traincheck] check summary (rank 0): no violations" in proc.stderr


def test_a_malformed_invariants_file_is_skipped_alone(inv, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    cases = [(f"{bad}:{inv}", [f"[traincheck] warning: invariants file {bad}: line 1: not valid JSON: "
                               "Expecting property name enclosed in double quotes; this file is skipped"]),
             # Only bad files: one warning, the agent stays off, training runs on.
             (str(bad), [f"[traincheck] warning: invariants file {bad}: line 1: not valid JSON: "
                         "Expecting property name enclosed in double quotes; this file is skipped",
                         "[traincheck] warning: no usable invariants file in TRAINCHECK_INV; the agent stays off"]),
             # None at all: the built-in pack is checked (tests/test_builtin_pack.py), no warning.
             ("", [])]
    outs = [tmp_path / f"run{i}" for i in range(len(cases))]
    procs = run_parallel(*[([MLP, "--steps", "3", "--bug", "no-zero-grad"],
                         agent_env("check", out, TRAINCHECK_INV=value))
                        for (value, _), out in zip(cases, outs, strict=True)])
    for (_, said), proc in zip(cases, procs, strict=True):
        assert proc.returncode == 0 and len(_losses(proc.stdout)) == 3
        warnings = [line for line in proc.stderr.splitlines() if line.startswith("[traincheck] warning")]
        assert warnings == said
    assert _violations(outs[0])  # the good file is still checked
    assert not outs[1].exists()
    assert "without TRAINCHECK_INV: checking the built-in invariants pack" in procs[2].stderr


def test_action_raise_stops_the_training_at_the_next_step(inv, tmp_path):
    proc, out = check(tmp_path, "raise", str(inv), "--steps", "8", "--bug", "no-zero-grad",
                      "--sleep-per-step", "0.001", TRAINCHECK_ACTION="raise")
    assert proc.returncode == 1
    last = proc.stderr.split("Traceback (most recent call last):")[1]
    found = re.search(r"TrainCheckViolation: invariant (\S+) \((\w+)\) violated at step (\d+): ", last)
    assert found, proc.stderr
    step = int(found.group(3))
    assert step == 1 and found.group(1) in {v["invariant"] for v in _violations(out) if v["step"] == step}
    finished = len(re.findall(r"^step \d+$", proc.stdout, re.M))  # the script prints each finished step
    assert step <= finished <= step + 1  # raised in the step of the violation or the next one


def test_action_abort_ends_the_process_with_its_own_status(inv, tmp_path):
    proc, out = check(tmp_path, "abort", str(inv), "--steps", "8", "--bug", "optimizer-over-frozen",
                      "--sleep-per-step", "0.001", TRAINCHECK_ACTION="abort")
    assert proc.returncode == ABORT_EXIT_STATUS == 86
    assert "[traincheck] aborting the training (TRAINCHECK_ACTION=abort), exit status 86: invariant ga-" in proc.stderr
    assert re.findall(r"^step \d+$", proc.stdout, re.M) in (["step 0"], ["step 0", "step 1"])
    violations = _violations(out)  # flushed before the exit
    assert violations and violations[0]["step"] == 0
    assert "check summary (rank 0)" in proc.stderr


def test_only_what_the_invariants_need_is_instrumented(inv, tmp_path):
    """With only the state invariants of optimizer.step (its transitions, and that it applies
    every grad), no API call is recorded and far fewer APIs are wrapped than in collect mode;
    TRAINCHECK_CHECK_TRACE=1 shows what was fed."""
    doc = json.loads(inv.read_text())
    doc["invariants"] = [i for i in doc["invariants"]
                         if i["relation"] in ("StateTransition", "GradApplied")
                         and i["subject"]["event"] == "optimizer.step"]
    assert len(doc["invariants"]) >= 4
    only_step = tmp_path / "step.json"
    only_step.write_text(json.dumps(doc))
    args = [MLP, "--steps", "3", "--bug", "optimizer-over-frozen"]
    out, collect = tmp_path / "selective", tmp_path / "collect"
    proc, full = run_parallel(
        (args, agent_env("check", out, TRAINCHECK_INV=str(only_step), TRAINCHECK_DEBUG="1", TRAINCHECK_CHECK_TRACE="1")),
        (args, agent_env("collect", collect, TRAINCHECK_DEBUG="1")))
    assert proc.returncode == 0, proc.stderr
    assert full.returncode == 0, full.stderr

    def wrapped(stderr: str, mode: str) -> int:
        return int(re.search(rf"debug: {mode} mode: (\d+) APIs wrapped", stderr).group(1))

    assert wrapped(proc.stderr, "check") <= 12 < 50 <= wrapped(full.stderr, "collect")
    [checked] = read_traces(out)
    [collected] = read_traces(collect)
    assert checked.calls() == [] and len(collected.calls()) > 30
    assert {r["where"] for r in checked.states()} == {"before:optimizer.step", "after:optimizer.step",
                                                       "after:backward"}
    assert {r["vtype"] for r in checked.states("after:optimizer.step")} == {"Parameter", "param_group"}
    fed = int(re.search(r"debug: check mode: (\d+) records checked", proc.stderr).group(1))
    lines = len(checked.path.read_bytes().splitlines())  # the header, each call, each snapshot
    assert fed == lines and len(checked.records) < len(collected.records) / 3
    assert {v["step"] for v in _violations(out)} == {0, 1, 2}


def test_ddp_under_torchrun_clean_and_same_data(tmp_path, torchrun_traces):
    """Per-rank checking under torchrun: a clean variant reports nothing on either rank; ranks
    fed the same batches (no DistributedSampler) break a cross-rank invariant, which the ranks'
    checkers exchange through the torch.distributed store and rank 0 reports."""
    def torchrun(mode: str, out: Path, *args: str, **env: str) -> tuple[list[str], dict[str, str]]:
        cmd = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", str(PIPELINES / "ddp_train.py"), *args]
        return cmd, agent_env(mode, out, OMP_NUM_THREADS="1", **env)

    invariants, files = infer_invariants([torchrun_traces("ddp_train.py", "--steps", "6")])
    assert {"CrossRankConsistent", "CrossRankValue", "StateTransition"} <= {i.relation for i in invariants}
    write_invariants(invariants, tmp_path / "inv.json", [str(f) for f in files])
    inv_file = str(tmp_path / "inv.json")
    clean, same = tmp_path / "clean", tmp_path / "same"
    procs = run_parallel(torchrun("check", clean, "--steps", "8", "--seed", "1", TRAINCHECK_INV=inv_file),
                      torchrun("check", same, "--steps", "4", "--bug", "same-data", TRAINCHECK_INV=inv_file))
    for proc in procs:
        assert proc.returncode == 0, proc.stderr
        assert "[traincheck] warning" not in proc.stderr
    for rank in (0, 1):
        assert _violations(clean, rank) == []
        assert f"[traincheck] check summary (rank {rank}): no violations ({len(invariants)} invariants" in procs[0].stderr
    found = _violations(same, 0)
    assert {v["relation"] for v in found} == {"CrossRankValue"}
    assert min(v["step"] for v in found) == -1 and found[0]["ranks"] == [0, 1]  # the very first batch
    assert _violations(same, 1) == []  # rank 0 compares


def test_requirements_follow_the_subjects():
    """What each relation's subject asks the agent to observe, against the default policy."""
    from traincheck_agent.check.requirements import reduce_policy, requirements_for
    from traincheck_agent.inference.invariant import Invariant
    from traincheck_agent.inference.preconditions import Clause
    from traincheck_agent.policy import load_policies
    from traincheck_agent.policy.loader import default_policy_files

    policy, problems = load_policies(default_policy_files())
    assert problems == []

    def inv(relation, precondition=(), **subject):
        return Invariant(relation, subject, tuple(precondition))

    step = inv("StateTransition", [Clause("before.grad", "nonzero")], event="zero_grad", attribute="grad",
               effect="changed")
    req = requirements_for([step], policy)
    assert req.state == {"before:zero_grad": {"params.grad"}, "after:zero_grad": {"params.grad"}}
    assert req.apis == {} and req.module_calls is None and not req.keep_nesting
    # "optimizer.step changes the data" also needs the grad before the step and the learning
    # rate it used (an update too small to show is undecided).
    changed = requirements_for([inv("StateTransition", event="optimizer.step", attribute="data", effect="changed")],
                               policy)
    assert changed.state == {"before:optimizer.step": {"params.data", "params.grad"},
                             "after:optimizer.step": {"params.data", "optimizer.hyperparams"}}
    # A call relation whose references saw grads (or none) when the call began reads them there.
    zeroes = inv("EventContain", api="torch.optim.Optimizer.zero_grad", child="torch.Tensor.zero_",
                 snapshot="before:zero_grad")
    assert requirements_for([zeroes], policy).state == {"before:zero_grad": {"params.grad"}}
    lr = inv("VarPeriodicChange", event="after:optimizer.step", vtype="param_group", variable="optimizer.param_groups.0",
             attribute="lr", period=1, offset=0)
    flag = inv("ContextArgument", api="torch.nn.functional.dropout", argument="training", value=False)
    order = inv("APISequence", form="covers", api="torch.optim.Optimizer.zero_grad", between="torch.optim.Adam.step")
    batches = inv("CrossRankValue", api="torch.utils.data.dataloader._BaseDataLoaderIter.__next__",
                  position="ret.items[0]", form="distinct")
    broken = inv("Threshold", api=7)
    unknown = inv("Telepathy", api="x")
    req = requirements_for([lr, flag, order, batches, broken, unknown], policy, world_size=2)
    assert req.state == {"after:optimizer.step": {"optimizer.hyperparams"}}
    assert req.apis == {
        "torch.nn.functional.dropout": ("summary", "none"),
        # Ordering needs the receivers' classes: whether the program has what it speaks of.
        "torch.optim.Optimizer.zero_grad": ("summary", "none"),
        "torch.optim.Adam.step": ("summary", "none"),
        "torch.utils.data.dataloader._BaseDataLoaderIter.__next__": ("none", "fingerprint"),
        # A param group's schedule is judged where the references' scheduler class steps it.
        "torch.optim.lr_scheduler.LRScheduler.step": ("summary", "none"),
    }
    assert req.module_calls == ("summary", "none")  # the enclosing module's training flag
    assert [i.relation for i in req.checked] == ["VarPeriodicChange", "ContextArgument", "APISequence", "CrossRankValue"]
    assert sorted(req.skipped) == ["malformed subject (expected an API name, got 7)", "unknown relation Telepathy"]
    assert requirements_for([batches], policy, world_size=1).checked == []  # one process: nothing to compare
    reduced, core = reduce_policy(policy, req)
    assert {r.module: r.include for r in reduced.apis.values()} == {
        "torch.nn.functional": ("dropout",), "torch.utils.data.dataloader": ("_BaseDataLoaderIter.__next__",),
        "torch.optim.lr_scheduler": ("LRScheduler.step",)}
    # (The framework entry points that name models are the integrations' own wrappers, not the policy's.)
    assert core == ["torch.optim.Adam.step", "torch.optim.Optimizer.zero_grad"]  # the core probes see those
    assert set(reduced.state) == {"after:optimizer.step"}
    # DistinctArgument judges outermost calls: every API of the policy stays wrapped.
    twice = inv("DistinctArgument", api="torch.nn.init.normal_", argument="tensor")
    reduced, _ = reduce_policy(policy, requirements_for([twice], policy))
    assert reduced.apis == policy.apis
