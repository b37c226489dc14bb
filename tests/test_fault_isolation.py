"""The agent's own faults stay inside the agent, and the user's exceptions pass through it.

TRAINCHECK_INJECT_FAULT makes one agent stage fail on purpose in a real training run. Whatever
the stage, the run must end as it does without the agent (exit status, losses bit for bit),
the user must get one warning naming the stage, and once the errors pass the agent's budget the
agent must switch itself off. A user exception raised inside instrumented calls must look the
same with and without the agent: type, message, the script's own traceback frames, its causes.
"""

from __future__ import annotations

import io
import json
import traceback
from contextlib import nullcontext, redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from conftest import (
    PIPELINES,
    agent_active,
    agent_env,
    collect_mlp_here,
    plain_losses,
    read_traces,
    run_here,
    run_parallel,
    run_script,
)

from traincheck_agent import faults
from traincheck_agent.agent.runtime import ERROR_BUDGET
from traincheck_agent.faults import ENV, STAGES
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import write_invariants

# Real training under the agent, in child processes where what is tested needs a process of its
# own (faults read from the environment at start-up, a checker process, ranks), else in this one
# with the faults armed here: the slow tier.
pytestmark = pytest.mark.slow

MLP = str(PIPELINES / "mlp_train.py")
RAISING = str(PIPELINES / "raising_train.py")
DDP = str(PIPELINES / "ddp_train.py")
STEPS = "12"
SWITCHED_OFF = f"agent switched off in this process: more than {ERROR_BUDGET} agent errors"


def _losses(stdout: str) -> list[float]:
    return json.loads(stdout.strip().splitlines()[-1])["losses"]


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("[traincheck] warning:")]


def _users_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("[traincheck]")]


def _stage_warning(stage: str) -> str:
    return f"[traincheck] warning: agent error in {STAGES[stage]} (InjectedFault: "


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> dict[str, list[float]]:
    """Losses of the runs without the agent: clean and with the forgotten zero_grad."""
    return {"clean": plain_losses("--steps", STEPS), "buggy": plain_losses("--steps", STEPS, "--bug", "no-zero-grad")}


@pytest.fixture(scope="module")
def inv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("reference")
    refs = [collect_mlp_here(root, f"ref{i}", "--steps", "10", "--seed", str(i)) for i in range(2)]
    invariants, files = infer_invariants(refs)
    path = root / "inv.json"
    write_invariants(invariants, path, [str(f) for f in files])
    return path


def _run_with_fault(spec: str, out: Path, mode: str = "collect", **settings: str) -> tuple[list[float], str]:
    """The losses and stderr of the MLP run in this process under the agent (``mode``,
    ``settings``) with the faults of ``spec`` armed, as ``TRAINCHECK_INJECT_FAULT`` arms them in
    a process that starts with it (a checker process of this one would not see them)."""
    faults.arm(spec)
    try:
        printed, errors = run_here(MLP, "--steps", STEPS, mode=mode, out=out, **settings)
    finally:
        faults.arm(None)
    return _losses(printed), errors


@pytest.mark.parametrize("stage", ["record", "describe", "fingerprint", "snapshot", "writer"])
def test_collect_stage_fault_is_one_warning_and_the_training_is_unchanged(stage, plain, tmp_path):
    out = tmp_path / "out"
    losses, stderr = _run_with_fault(stage, out)
    assert losses == plain["clean"]
    warnings = _warnings(stderr)
    assert warnings[0].startswith(_stage_warning(stage)), stderr
    assert sum(w.startswith("[traincheck] warning: agent error in") for w in warnings) == 1
    if stage != "writer":  # a stage entered on every call or snapshot passes the budget
        assert warnings[1:] == [f"[traincheck] warning: {SWITCHED_OFF}"], stderr
    else:  # every batch failed to be written: a few errors, nothing recorded, nothing else said
        assert len(warnings) == 1 and not list(out.glob("*.jsonl")), stderr
    for trace in read_traces(out) if out.exists() else []:  # whatever was written stays readable
        assert trace.header["mode"] == "collect"


def test_a_fault_in_wrapping_switches_the_agent_off_before_the_training(plain, tmp_path):
    losses, stderr = _run_with_fault("wrap", tmp_path / "out")
    assert losses == plain["clean"]
    [warning] = _warnings(stderr)
    assert "agent switched off in this process: cannot instrument torch" in warning
    assert STAGES["wrap"] in warning
    assert not list((tmp_path / "out").glob("*.jsonl"))


def test_a_fault_read_from_the_environment_at_start_up_is_injected(plain, tmp_path):
    """The variable arms the faults of a process that starts with it: two failed snapshots,
    one warning, the agent stays on, later snapshots are recorded."""
    out = tmp_path / "out"
    [proc] = run_parallel(([MLP, "--steps", STEPS], agent_env("collect", out, **{ENV: "snapshot:2"})))
    assert proc.returncode == 0, proc.stderr
    assert _losses(proc.stdout) == plain["clean"]
    [warning] = _warnings(proc.stderr)
    assert warning.startswith(_stage_warning("snapshot"))
    [trace] = read_traces(out)
    steps_with_update = {r["step"] for r in trace.states("after:optimizer.step")}
    assert steps_with_update == set(range(int(STEPS)))  # the failed ones came before the first step


@pytest.mark.parametrize(("stage", "checker"), [("checker", "thread"), ("checker", "process"),
                                                ("fingerprint", "auto"), ("describe", "auto")])
def test_check_stage_fault_is_one_warning_and_the_training_is_unchanged(stage, checker, inv, plain, tmp_path):
    out = tmp_path / "out"
    if checker == "process":  # the checker process arms its faults from its environment
        [proc] = run_parallel(([MLP, "--steps", STEPS], agent_env("check", out, TRAINCHECK_INV=str(inv),
                                                                 TRAINCHECK_CHECKER=checker, **{ENV: stage})))
        assert proc.returncode == 0, proc.stderr
        losses, stderr = _losses(proc.stdout), proc.stderr
    else:
        losses, stderr = _run_with_fault(stage, out, "check", TRAINCHECK_INV=str(inv), TRAINCHECK_CHECKER=checker)
    assert losses == plain["clean"]
    warnings = _warnings(stderr)
    # A checker process reports its errors as text: the parent names the stage, then the child's error.
    assert warnings[0].startswith(_stage_warning(stage).replace("(InjectedFault: ", "(")), stderr
    assert "InjectedFault: fault injected into" in warnings[0]
    assert sum(w.startswith("[traincheck] warning: agent error in") for w in warnings) == 1
    assert f"[traincheck] warning: {SWITCHED_OFF}" in warnings
    assert not list(out.glob("violations-*.jsonl")) or not (out / "violations-0.jsonl").read_text().strip()


def test_a_failing_violation_log_leaves_the_buggy_training_as_it_was(inv, plain, tmp_path):
    out = tmp_path / "out"
    [proc] = run_parallel(([MLP, "--steps", STEPS, "--bug", "no-zero-grad"],
                           agent_env("check", out, TRAINCHECK_INV=str(inv), **{ENV: "violation-log"})))
    assert proc.returncode == 0, proc.stderr
    assert _losses(proc.stdout) == plain["buggy"]
    warnings = _warnings(proc.stderr)
    assert [w for w in warnings if "agent error in" in w][0].startswith(_stage_warning("violation-log"))
    assert "[traincheck] check summary (rank 0):" in proc.stderr  # the summary still counts them


def test_a_failing_store_exchange_switches_only_cross_rank_checks_off(tmp_path, torchrun_traces):
    def torchrun(mode: str | None, out: Path | None, *args: str, **env: str) -> tuple[list[str], dict[str, str]]:
        cmd = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", DDP, *args]
        return cmd, agent_env(mode, out, OMP_NUM_THREADS="1", **env)

    invariants, files = infer_invariants([torchrun_traces("ddp_train.py", "--steps", "6")])
    assert any(i.relation.startswith("CrossRank") for i in invariants)
    write_invariants(invariants, tmp_path / "inv.json", [str(f) for f in files])
    checked, plain = run_parallel(
        torchrun("check", tmp_path / "check", "--steps", "6", "--seed", "1",
                 TRAINCHECK_INV=str(tmp_path / "inv.json"), **{ENV: "exchange"}),
        torchrun(None, None, "--steps", "6", "--seed", "1"))
    assert checked.returncode == 0 and plain.returncode == 0, checked.stderr + plain.stderr

    def losses(stdout: str) -> dict[int, list[float]]:
        rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        return {row["rank"]: row["losses"] for row in rows}

    assert losses(checked.stdout) == losses(plain.stdout) and len(losses(plain.stdout)) == 2
    failed = [w for w in _warnings(checked.stderr) if "the cross-rank exchange failed (InjectedFault: " in w]
    assert len(failed) == 2, checked.stderr  # one per rank
    assert all("cross-rank invariants are not checked for the rest of the run" in w for w in failed)
    for rank in (0, 1):  # the other invariants were still checked, to the end
        assert f"[traincheck] check summary (rank {rank}): no violations" in checked.stderr


def _raise_here(where: str, mode: str | None, out: Path | None = None, **settings: str) -> tuple[dict, str, str]:
    """Run the raising script in this process (under the agent for ``mode``): what it printed
    about its exception, the exception's own last line, and what reached stderr."""
    import torch

    printed, errors = io.StringIO(), io.StringIO()
    agent = agent_active(mode, out, **settings) if mode else nullcontext()
    with torch.random.fork_rng(devices=[]), redirect_stdout(printed), redirect_stderr(errors), agent, \
            pytest.raises(BaseException) as raised:
        run_script(RAISING, "--where", where)
    last_line = traceback.format_exception_only(raised.type, raised.value)[-1]
    return json.loads(printed.getvalue().strip().splitlines()[-1]), last_line, errors.getvalue()


@pytest.mark.parametrize("where", ["forward", "torch", "loop"])
def test_user_exceptions_pass_through_unchanged(where, inv, tmp_path):
    """Raised in a module's forward (with a cause), inside a torch function, or in the loop:
    the same exception, frames and causes with and without the agent (in this process: the
    agent has no exception hook, so what the interpreter prints follows from the exception)."""
    seen, last_line, _ = _raise_here(where, None)
    assert seen["frames"] and seen["chain"]
    for mode, settings in (("collect", {}), ("check", {"TRAINCHECK_INV": str(inv)})):
        described, line, errors = _raise_here(where, mode, tmp_path / mode, **settings)
        assert (described, line) == (seen, last_line), mode
        assert "agent error" not in errors, errors


def test_a_user_exception_ends_the_process_as_without_the_agent(inv, tmp_path):
    """The exception reaches the interpreter's top level: same exit status, same last line."""
    args = [RAISING, "--where", "forward"]
    plain, collected, checked = run_parallel(
        (args, agent_env(None, None)),
        (args, agent_env("collect", tmp_path / "collect")),
        (args, agent_env("check", tmp_path / "check", TRAINCHECK_INV=str(inv))))
    seen = json.loads(plain.stdout.strip().splitlines()[-1])
    assert plain.returncode == 1 and seen["frames"] and seen["chain"]
    for proc in (collected, checked):
        assert proc.returncode == plain.returncode
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == seen
        assert _users_lines(proc.stderr)[-1] == _users_lines(plain.stderr)[-1]  # the exception line as printed
        assert "agent error" not in proc.stderr
