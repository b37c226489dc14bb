"""The agent inside the pytest process: taken out again without a trace, and collect, infer
and check end to end on the MLP pipeline, in seconds rather than a child process each."""

from __future__ import annotations

import json
import sys
import threading

import pytest
import torch
from conftest import MLP, run_script

from traincheck_agent.agent import bootstrap, patching, runtime
from traincheck_agent.agent.in_process import start_in_process, stop_in_process
from traincheck_agent.check.offline import check_offline
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import read_invariants, write_invariants


class _SubclassedSGD(torch.optim.SGD):
    def step(self, closure=None):  # a user optimizer with its own step
        return super().step(closure)


def _owned(owner, attr):
    return vars(owner)[attr]


def _wrappable_attributes() -> dict[str, object]:
    """The attributes the agent wraps, each as the owner holds it now."""
    return {
        "Module.__call__": torch.nn.Module.__call__,
        "Module.train": torch.nn.Module.train,
        "Optimizer.__init__": torch.optim.Optimizer.__init__,
        "Tensor.backward": _owned(torch.Tensor, "backward"),
        "autograd.backward": torch.autograd.backward,
        "subclass.step": _owned(_SubclassedSGD, "step"),
        "F.dropout": torch.nn.functional.dropout,
        "init_process_group": torch.distributed.init_process_group,
    }


def test_uninstall_restores_every_wrapped_attribute(tmp_path):
    model = torch.nn.Linear(4, 2)
    _SubclassedSGD(model.parameters(), lr=0.1)  # torch hooks a class's step on its first instance
    originals = _wrappable_attributes()
    start_in_process("collect", {"TRAINCHECK_OUT": str(tmp_path)})
    try:
        opt = _SubclassedSGD(model.parameters(), lr=0.1)  # wraps the subclass's step
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
        assert runtime.current is not None
        assert patching.is_traced(torch.nn.Module.__dict__["__call__"])
        assert patching.is_traced(_owned(_SubclassedSGD, "step"))
        assert patching.is_traced(torch.nn.functional.dropout)  # a policy's API
        assert len(patching._undo_log) > 20
    finally:
        stop_in_process()
    now = _wrappable_attributes()
    assert {k: now[k] is v for k, v in originals.items()} == dict.fromkeys(originals, True)
    assert runtime.current is None and patching._undo_log == [] and not bootstrap._started
    assert not [t.name for t in threading.enumerate() if t.name.startswith("traincheck")]


def test_an_attribute_that_was_inherited_is_deleted_again():
    class Base:
        def go(self):
            return "base"

    class Child(Base):
        pass

    assert patching.wrap_attribute(Child, "go", lambda wrapped, instance, args, kwargs: "wrapped")
    assert "go" in vars(Child) and Child().go() == "wrapped"
    patching.uninstall()
    assert "go" not in vars(Child) and Child().go() == "base"


def test_hooks_registered_before_uninstall_do_nothing(tmp_path, monkeypatch):
    (tmp_path / "tc_late_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    patching.on_import("tc_late_module", lambda module: seen.append("old"))
    patching.uninstall()
    patching.on_import("tc_late_module", lambda module: seen.append("new"))
    import tc_late_module  # noqa: F401

    assert seen == ["new"]
    sys.modules.pop("tc_late_module", None)


def test_collect_records_the_training_loop(agent_in_process):
    agent = agent_in_process("collect")
    run_script(MLP, "--steps", "5")
    trace = agent.trace()
    assert trace.header["mode"] == "collect" and trace.header["rank"] == 0
    assert "torch.yaml" in trace.header["policies"]
    steps = trace.calls("torch.optim.Adam.step")
    assert [c["step"] for c in steps] == list(range(5)) and all(c["phase"] == "train" for c in steps)
    assert [c["step"] for c in trace.calls("torch.optim.Optimizer.zero_grad")] == list(range(5))
    backward = trace.calls("torch.Tensor.backward")
    assert [c["step"] for c in backward] == list(range(5))
    assert {c["parent"] for c in trace.calls("torch.autograd.backward")} == {c["id"] for c in backward}
    forwards = trace.calls("__main__.MLP.forward")
    assert [c["phase"] for c in forwards] == ["train"] * 5 + ["eval"]
    assert forwards[0]["args"]["self"] == {"t": "MLP", "training": True, "name": "model"}
    init_calls = [c for c in trace.calls() if c["step"] == -1]
    assert init_calls and all(c["phase"] == "init" for c in init_calls)
    # State snapshots around each optimizer step: the step changes the data, not the grad.
    var = "model.head.weight"
    before = trace.states("before:optimizer.step", var)
    after = trace.states("after:optimizer.step", var)
    assert [s["step"] for s in before] == [s["step"] for s in after] == list(range(5))
    step_ids = {c["id"] for c in steps}
    assert {s["call"] for s in after} <= step_ids
    for b, a in zip(before, after, strict=True):
        assert b["attrs"]["data"]["h"] != a["attrs"]["data"]["h"]
        assert b["attrs"]["grad"]["h"] == a["attrs"]["grad"]["h"]
    assert all(s["attrs"]["grad"] is None for s in trace.states("after:zero_grad", var))


def test_two_runs_in_one_process_are_numbered_apart(agent_in_process):
    """The second agent starts from a clean clock, registry and call stack."""
    first = agent_in_process("collect")
    run_script(MLP, "--steps", "2")
    first.stop()
    second = agent_in_process("collect")
    run_script(MLP, "--steps", "3", "--optimizer", "sgd")
    [a], [b] = first.traces(), second.traces()
    assert [c["step"] for c in a.calls("torch.optim.Adam.step")] == [0, 1]
    assert [c["step"] for c in b.calls("torch.optim.SGD.step")] == [0, 1, 2]
    assert not b.calls("torch.optim.Adam.step")
    assert b.header["run_id"] != a.header["run_id"] or b.header["started_ns"] > a.header["started_ns"]


@pytest.fixture
def references(agent_in_process, tmp_path):
    """Invariants of two clean MLP runs collected in this process (one with a frozen backbone)."""
    refs = [tmp_path / "ref", tmp_path / "frozen"]
    for out, args in zip(refs, (("--steps", "10"), ("--steps", "8", "--freeze-backbone")), strict=True):
        agent = agent_in_process("collect", out_dir=out)
        run_script(MLP, *args)
        agent.stop()
    invariants, files = infer_invariants(refs)
    path = tmp_path / "inv.json"
    write_invariants(invariants, path, [str(f) for f in files])
    return path


def test_infer_and_check_offline_catch_a_forgotten_zero_grad(agent_in_process, references, tmp_path):
    invariants = read_invariants(references)
    assert {i.relation for i in invariants} >= {"StateTransition", "APISequence", "GradApplied"}
    clean = agent_in_process("collect", out_dir=tmp_path / "clean")
    run_script(MLP, "--steps", "4", "--accumulate", "4")
    clean.stop()
    assert check_offline(invariants, [tmp_path / "clean"]) == []
    buggy = agent_in_process("collect", out_dir=tmp_path / "bug")
    run_script(MLP, "--steps", "4", "--bug", "no-zero-grad")
    buggy.stop()
    violations = check_offline(invariants, [tmp_path / "bug"])
    stale = [v for v in violations if v["relation"] == "StateTransition"]
    assert stale and stale[0]["step"] == 1
    assert [v["step"] for v in violations if v["relation"] == "APISequence"] == [1, 2, 3]


def test_check_mode_catches_a_forgotten_zero_grad_online(agent_in_process, references, tmp_path, capsys):
    out = tmp_path / "check"
    agent = agent_in_process("check", out_dir=out, TRAINCHECK_INV=str(references))
    assert agent.writer is not None  # the invariants were usable
    run_script(MLP, "--steps", "4", "--bug", "no-zero-grad")
    agent.stop()  # closing the writer finishes the checker
    lines = [json.loads(line) for line in (out / "violations-0.jsonl").read_text().splitlines()]
    violations = [v for v in lines if v.get("event") != "coverage"]
    stale = [v for v in violations if v["relation"] == "StateTransition"]
    assert stale and min(v["step"] for v in stale) == 1
    assert len({v["variable"] for v in stale if v["step"] == 1}) == 6
    assert [v["step"] for v in violations if v["relation"] == "APISequence"] == [1, 2, 3]
    assert not list(out.glob("trace_*.jsonl"))  # check mode writes no trace unless asked
    assert "[traincheck] violation at rank 0 step 1" in capsys.readouterr().err


def test_check_mode_reports_nothing_on_a_clean_run(agent_in_process, references, tmp_path, capsys):
    out = tmp_path / "check"
    agent = agent_in_process("check", out_dir=out, TRAINCHECK_INV=str(references))
    run_script(MLP, "--steps", "5", "--optimizer", "sgd", "--seed", "3", "--lr", "0.005")
    agent.stop()
    violations = [json.loads(line) for line in (out / "violations-0.jsonl").read_text().splitlines()
                  if json.loads(line).get("event") != "coverage"] if (out / "violations-0.jsonl").exists() else []
    assert violations == []
    assert "[traincheck] check summary (rank 0): no violations" in capsys.readouterr().err
