"""Collect mode end to end: real training scripts, unchanged, run under the agent."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from conftest import PIPELINES, Trace, agent_env, read_traces, run_parallel, run_python

from traincheck_agent.examples import cnn_train
from traincheck_agent.trace.schema import SCHEMA_VERSION

# Every test here starts Python child processes (real training under the agent, launchers, the
# startup hook, the CLI): the slow tier.
pytestmark = pytest.mark.slow

MLP = str(PIPELINES / "mlp_train.py")


def _losses(stdout: str) -> list[float]:
    return json.loads(stdout.strip().splitlines()[-1])["losses"]


def _collect(tmp_path, *script_args: str, **extra: str):
    out = tmp_path / "trace"
    proc = run_python([MLP, *script_args], agent_env("collect", out, **extra))
    assert proc.returncode == 0, proc.stderr
    assert "[traincheck]" not in proc.stderr, proc.stderr
    traces = read_traces(out)
    assert len(traces) == 1, [t.path.name for t in traces]
    return proc, traces[0]


@pytest.fixture(scope="module")
def mlp_trace(tmp_path_factory) -> Trace:
    """A clean 6-step MLP run collected through the startup hook, which several tests read."""
    return _collect(tmp_path_factory.mktemp("mlp"), "--steps", "6")[1]


def test_header_describes_the_process(mlp_trace):
    trace = mlp_trace
    h = trace.header
    assert h["schema"] == SCHEMA_VERSION and h["mode"] == "collect"
    assert h["rank"] == 0 and h["world_size"] == 1
    assert h["run_id"] and h["pid"] > 0 and h["host"]
    assert h["versions"]["torch"].startswith("2.")
    assert "torch.yaml" in h["policies"] and len(h["policy_digest"]) == 16
    assert trace.path.name == f"trace_{h['run_id']}_rank0_pid{h['pid']}.jsonl"


def test_steps_phases_and_core_calls(mlp_trace):
    trace = mlp_trace
    steps = trace.calls("torch.optim.Adam.step")
    assert [c["step"] for c in steps] == list(range(6))
    assert all(c["phase"] == "train" for c in steps)
    zero = trace.calls("torch.optim.Optimizer.zero_grad")
    assert [c["step"] for c in zero] == list(range(6))
    assert zero[0]["args"]["self"]["t"] == "Adam"
    backward = trace.calls("torch.Tensor.backward")
    assert [c["step"] for c in backward] == list(range(6))
    # The nested torch.autograd.backward call has the Tensor.backward call as parent.
    inner = trace.calls("torch.autograd.backward")
    assert {c["parent"] for c in inner} == {c["id"] for c in backward}
    forwards = trace.calls("__main__.MLP.forward")
    assert [c["phase"] for c in forwards] == ["train"] * 6 + ["eval"]
    assert forwards[-1]["step"] == 6 and forwards[-1]["ctx"] == {"grad": False}
    assert forwards[0]["args"]["self"] == {"t": "MLP", "training": True, "name": "model"}
    assert forwards[0]["ret"]["shape"] == [64, 4] and forwards[0]["ret"]["dtype"] == "float32"
    # Submodule calls nest inside the root forward call.
    linears = [c for c in trace.calls("torch.nn.Linear.forward") if c["step"] == 0]
    assert {c["args"]["self"]["name"] for c in linears} == {"model.backbone.0", "model.backbone.2", "model.head"}
    ce = trace.calls("torch.nn.functional.cross_entropy")
    assert len(ce) == 6 and ce[0]["ret"]["shape"] == [] and ce[0]["args"]["input"]["shape"] == [64, 4]
    # Before training: model construction events are at step -1, phase init.
    init_calls = [c for c in trace.calls() if c["step"] == -1]
    assert init_calls and all(c["phase"] == "init" for c in init_calls)
    assert any(c["api"] == "torch.nn.init.kaiming_uniform_" for c in init_calls)


def test_state_snapshots_follow_the_parameters(mlp_trace):
    trace = mlp_trace
    var = "model.head.weight"
    before = trace.states("before:optimizer.step", var)
    after = trace.states("after:optimizer.step", var)
    assert [s["step"] for s in after] == list(range(6))
    step_calls = {c["id"]: c for c in trace.calls("torch.optim.Adam.step")}
    assert all(s["call"] in step_calls and step_calls[s["call"]]["step"] == s["step"] for s in after)
    for b, a in zip(before, after, strict=False):
        assert b["attrs"]["data"]["h"] != a["attrs"]["data"]["h"]  # step changed the data
        assert b["attrs"]["grad"]["h"] == a["attrs"]["grad"]["h"]  # and not the grad
        assert a["attrs"]["dtype"] == "float32" and a["attrs"]["shape"] == [4, 32]
        assert a["attrs"]["requires_grad"] is True and a["owner"] == "model"
    for prev, nxt in zip(after, before[1:], strict=False):  # nothing else touches data between steps
        assert prev["attrs"]["data"]["h"] == nxt["attrs"]["data"]["h"]
    # zero_grad (set_to_none) empties grads that backward then fills with non-zero values.
    cleared = trace.states("after:zero_grad", var)
    assert all(s["attrs"]["grad"] is None for s in cleared)
    filled = trace.states("after:backward", var)
    assert all(s["attrs"]["grad"] is not None and not s["attrs"]["grad"]["zero"] for s in filled)
    lr = trace.states("after:optimizer.step", "optimizer.param_groups.0")
    assert lr and lr[0]["attrs"]["lr"] == 0.01
    modes = {s["var"]: s["attrs"]["training"] for s in trace.states("after:module.train") if s["step"] == 1}
    assert modes == {"model": True, "model.backbone": True, "model.backbone.0": True, "model.backbone.1": True,
                     "model.backbone.2": True, "model.backbone.3": True, "model.head": True}


def test_frozen_backbone_keeps_model_names(tmp_path):
    _, trace = _collect(tmp_path, "--steps", "3", "--freeze-backbone")
    assert {s["var"] for s in trace.states("after:optimizer.step") if s["vtype"] == "Parameter"} == {
        "model.head.weight", "model.head.bias"}
    frozen = [c for c in trace.calls("torch.Tensor.requires_grad_") if c["step"] == -1]
    # Four backbone tensors frozen before training starts (before the model is known by name).
    assert [(c["args"]["self"]["shape"], c["args"]["requires_grad"]) for c in frozen] == [
        ([32, 16], False), ([32], False), ([32, 32], False), ([32], False)]


def test_a_model_that_builds_its_own_optimizer_is_named_as_its_caller_holds_it(tmp_path):
    out = tmp_path / "t"
    proc = run_python([str(PIPELINES / "gpt_train.py"), "--steps", "3"], agent_env("collect", out))
    assert proc.returncode == 0, proc.stderr
    [trace] = read_traces(out)
    names = {s["var"] for s in trace.states("after:optimizer.step") if s["vtype"] == "Parameter"}
    assert "model.transformer.wte.weight" in names and "model.lm_head.weight" in names
    assert all(name.startswith("model.") for name in names), names


@pytest.fixture(scope="module")
def cnn_runs(tmp_path_factory) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess, Trace]:
    """The bundled CNN example, 12 steps with an evaluation every 6: without the agent, and
    collected (with its trace)."""
    out = tmp_path_factory.mktemp("cnn") / "t"
    args = [cnn_train.__file__, "--steps", "12", "--eval-every", "6"]
    plain, traced = run_parallel((args, agent_env(None, None)), (args, agent_env("collect", out)))
    assert plain.returncode == 0 and traced.returncode == 0, traced.stderr
    return plain, traced, read_traces(out)[0]


def test_results_are_bit_identical_with_the_agent(cnn_runs):
    plain, traced, trace = cnn_runs
    assert _losses(plain.stdout) == _losses(traced.stdout)
    assert plain.stdout.splitlines()[:-1] == traced.stdout.splitlines()[:-1]  # eval accuracies
    assert trace.calls("torch.nn.functional.dropout")


def test_mode_unset_leaves_no_trace(tmp_path):
    proc = run_python([MLP, "--steps", "2"], agent_env(None, tmp_path / "t"))
    assert proc.returncode == 0 and proc.stderr == ""
    assert not (tmp_path / "t").exists()


def test_user_exception_passes_through(tmp_path):
    out = tmp_path / "t"
    proc = run_python([MLP, "--steps", "5", "--raise-at", "2"], agent_env("collect", out))
    assert proc.returncode == 1
    assert proc.stderr.rstrip().endswith("KeyError: 'user error at step 2'")
    assert 'mlp_train.py", line' in proc.stderr and "[traincheck]" not in proc.stderr
    trace = read_traces(out)[0]
    assert [c["step"] for c in trace.calls("torch.optim.Adam.step")] == [0, 1]


def test_dataloader_workers_leave_no_traces(tmp_path):
    out = tmp_path / "t"
    proc = run_python([cnn_train.__file__, "--steps", "6", "--workers", "2"], agent_env("collect", out))
    assert proc.returncode == 0, proc.stderr
    traces = read_traces(out)
    assert len(traces) == 1 and traces[0].header["pid"] != 0
    batches = traces[0].calls("torch.utils.data.dataloader._BaseDataLoaderIter.__next__")
    assert len(batches) == 6
    images = batches[0]["ret"]["items"][0]
    assert images["shape"] == [32, 1, 28, 28] and images["fp"]["h"].startswith("x3:")
    assert len({b["ret"]["items"][0]["fp"]["h"] for b in batches}) == 6


def test_sigterm_leaves_a_readable_trace(tmp_path):
    out = tmp_path / "t"
    proc = subprocess.Popen([sys.executable, MLP, "--steps", "100000", "--sleep-per-step", "0.05"],
                            env=agent_env("collect", out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("step 5"):
                break
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGTERM
    trace = read_traces(out)[0]
    assert len(trace.calls("torch.optim.Adam.step")) >= 6


SIGNAL_STATE = """
import signal, threading
def state():
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    names = sorted(t.name for t in threading.enumerate() if t.name.startswith("traincheck"))
    return [signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, fd, names]
seen = [state()]
import torch
seen.append(state())
model = torch.nn.Linear(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    opt.zero_grad()
    model(torch.ones(4, 3)).sum().backward()
    opt.step()
seen.append(state())
print(seen)
"""


def test_signal_state_is_the_programs_until_training_starts(tmp_path):
    script = tmp_path / "signals.py"
    script.write_text(SIGNAL_STATE)
    proc = run_python([str(script)], agent_env("collect", tmp_path / "t"))
    assert proc.returncode == 0, proc.stderr
    at_start, after_import, trained = eval(proc.stdout.strip().splitlines()[-1])
    assert at_start == after_import == [True, -1, []]
    # Once it records: the SIGTERM flush is ours, the wakeup fd still reads as the program's.
    assert trained == [False, -1, ["traincheck-sigterm-watch", "traincheck-trace-writer"]]


def _torchrun_two_ranks(script: str, out):
    cmd = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", str(PIPELINES / script)]
    proc = run_python(cmd, agent_env("collect", out, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr
    assert "[traincheck]" not in proc.stderr, proc.stderr
    return sorted(read_traces(out), key=lambda t: t.header["rank"])


def test_torchrun_writes_one_trace_per_rank(torchrun_traces):
    out = torchrun_traces("ddp_train.py", "--steps", "6")
    assert "[traincheck]" not in torchrun_traces.stderr[out], torchrun_traces.stderr[out]
    traces = sorted(read_traces(out), key=lambda t: t.header["rank"])
    assert [t.header["rank"] for t in traces] == [0, 1]
    assert {t.header["world_size"] for t in traces} == {2}
    assert len({t.header["run_id"] for t in traces}) == 1
    for rank, trace in enumerate(traces):
        assert f"_rank{rank}_" in trace.path.name
        process = [r for r in trace.records if r["kind"] == "process"]
        assert process and process[0]["rank"] == rank and process[0]["backend"] == "gloo"
        names = {s["var"] for s in trace.states("after:optimizer.step") if s["vtype"] == "Parameter"}
        assert names == {"model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"}
        assert [c["step"] for c in trace.calls("torch.optim.SGD.step")] == list(range(6))
    # DDP replicas hold the same parameters at every step.
    def data(trace):
        return [(s["step"], s["var"], s["attrs"]["data"]["h"]) for s in trace.states("after:optimizer.step")
                if s["vtype"] == "Parameter"]
    assert data(traces[0]) == data(traces[1])


def test_accelerate_prepare_keeps_the_users_names(tmp_path):
    out = tmp_path / "t"
    proc = run_python([str(PIPELINES / "accelerate_train.py")], agent_env("collect", out))
    assert proc.returncode == 0, proc.stderr
    assert "[traincheck]" not in proc.stderr, proc.stderr
    trace = read_traces(out)[0]
    params = {s["var"] for s in trace.states("after:optimizer.step") if s["vtype"] == "Parameter"}
    assert params == {"net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"}
    assert [c["step"] for c in trace.calls("accelerate.optimizer.AcceleratedOptimizer.step")] == [0, 1, 2, 3]
    # The wrapper's step contains the torch optimizer's step, which carries the same step number.
    outer = {c["id"]: c["step"] for c in trace.calls("accelerate.optimizer.AcceleratedOptimizer.step")}
    inner = trace.calls("torch.optim.AdamW.step")
    assert [outer[c["parent"]] for c in inner] == [c["step"] for c in inner] == [0, 1, 2, 3]


def test_buffers_are_snapshotted_after_steps(cnn_runs):
    trace = cnn_runs[2]
    means = trace.states("after:optimizer.step", "model.bn1.running_mean")
    assert [s["step"] for s in means] == list(range(12)) and means[0]["vtype"] == "buffer"
    assert len({s["attrs"]["data"]["h"] for s in means}) == 12  # BatchNorm statistics move every step
    tracked = trace.states("after:optimizer.step", "model.bn1.num_batches_tracked")
    assert tracked[0]["attrs"]["dtype"] == "int64"


def test_spawned_dataloader_workers_leave_no_traces(tmp_path):
    # The workers call torch.nn.functional.dropout (a wrapped API): they start the agent like
    # any spawned child and must switch it off once they turn out to be DataLoader workers.
    out = tmp_path / "t"
    proc = run_python([str(PIPELINES / "spawn_loader_train.py")], agent_env("collect", out))
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    traces = read_traces(out)
    assert len(traces) == 1
    assert len(traces[0].calls("torch.optim.SGD.step")) == 4
    assert not traces[0].calls("torch.nn.functional.dropout")


def test_accelerate_two_processes_under_torchrun(tmp_path):
    traces = _torchrun_two_ranks("accelerate_train.py", tmp_path / "t")
    assert [(t.header["rank"], t.header["world_size"]) for t in traces] == [(0, 2), (1, 2)]
    for trace in traces:
        params = {s["var"] for s in trace.states("after:optimizer.step") if s["vtype"] == "Parameter"}
        assert params == {"net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"}
        assert [c["step"] for c in trace.calls("torch.optim.AdamW.step")] == [0, 1, 2, 3]
        assert trace.calls("torch.nn.parallel.DistributedDataParallel.forward")


def test_policy_attributes_of_parameters_from_instances_and_classes(tmp_path):
    """Attributes the policy names (``param_attributes``) are recorded whether the parameter
    holds them itself (Megatron, DeepSpeed) or its class answers for them (a property), and
    parameters with neither record none."""
    script = tmp_path / "tagged.py"
    script.write_text(
        "import torch\n"
        "from torch import nn\n"
        "class TaggedParameter(nn.Parameter):\n"
        "    @property\n"
        "    def shared(self):\n"
        "        return True\n"
        "torch.manual_seed(0)\n"
        "model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))\n"
        "model[0].weight = TaggedParameter(model[0].weight.detach().clone())\n"
        "model[0].bias.ds_id = 7\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(2):\n"
        "    opt.zero_grad()\n"
        "    model(torch.randn(5, 4)).sum().backward()\n"
        "    opt.step()\n"
    )
    out = tmp_path / "out"
    proc = run_python([str(script)], agent_env("collect", out))
    assert proc.returncode == 0, proc.stderr
    [trace] = read_traces(out)
    after = {s["var"]: s["attrs"] for s in trace.states("after:optimizer.step") if s.get("vtype") != "param_group"}
    assert after["model.0.weight"]["shared"] is True and "ds_id" not in after["model.0.weight"]
    assert after["model.0.bias"]["ds_id"] == 7 and "shared" not in after["model.0.bias"]
    assert not {"shared", "ds_id"} & set(after["model.1.weight"])
