"""Inference on traces collected from real CPU training: what is learned, its preconditions,
determinism, and a first offline check of clean and buggy variants."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    PIPELINES,
    agent_env,
    collect_in_process,
    collect_mlp_here,
    run_python,
)

from traincheck_agent.check.offline import check_offline
from traincheck_agent.inference import stream
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import (
    InvariantFileError,
    read_invariants,
    write_invariants,
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    return {
        "reference": collect_mlp_here(root, "reference", "--steps", "10"),
        "frozen_reference": collect_mlp_here(root, "frozen_reference", "--steps", "8", "--freeze-backbone"),
        "clean_sgd": collect_mlp_here(root, "clean_sgd", "--steps", "7", "--optimizer", "sgd", "--seed", "3", "--lr", "0.005"),
        "clean_frozen": collect_mlp_here(root, "clean_frozen", "--steps", "5", "--freeze-backbone", "--seed", "5"),
        "clean_accumulation": collect_mlp_here(root, "clean_accumulation", "--steps", "4", "--accumulate", "4"),
        "bug_frozen_optimizer": collect_mlp_here(root, "bug", "--steps", "4", "--bug", "optimizer-over-frozen"),
        "bug_no_zero_grad": collect_mlp_here(root, "bug_no_zero_grad", "--steps", "4", "--bug", "no-zero-grad"),
    }


def _by_subject(invariants):
    return {(i.subject["event"], i.subject["attribute"], i.subject["effect"]): i
            for i in invariants if i.relation == "StateTransition"}


@pytest.mark.slow
def test_core_training_invariants_are_learned(runs):
    invariants, files = infer_invariants([runs["reference"]])
    found = _by_subject(invariants)

    def clauses(key):
        return [c.text() for c in found[key].precondition]

    # Every call in the reference was the first of its kind in its step: the invariants are
    # scoped to that (a second backward in one step would be gradient accumulation).
    scope = ["first_in_step = True"]
    assert clauses(("optimizer.step", "data", "changed")) == scope
    assert clauses(("zero_grad", "grad", "becomes_none_or_zero")) == scope
    assert clauses(("backward", "grad", "becomes_nonzero")) == scope
    assert clauses(("backward", "grad", "finds_none_or_zero")) == scope
    assert found[("optimizer.step", "grad", "unchanged")].support["passing"] == 60  # 6 params x 10 steps
    assert len(files) == 1
    # zero_grad at step 0 sees no grads yet: nothing to change there, so those examples are
    # undecided and need no clause of their own.
    assert clauses(("zero_grad", "grad", "changed")) == scope


@pytest.mark.slow
def test_frozen_parameters_are_not_examples_of_backward(runs):
    """Backward touches only parameters that require grad: a frozen backbone neither breaks
    "backward leaves the grad non-zero" nor needs a precondition, and the domain says which
    parameters the invariant speaks of."""
    invariants, _ = infer_invariants([runs["reference"], runs["frozen_reference"]])
    fills = _by_subject(invariants)[("backward", "grad", "becomes_nonzero")]
    assert [c.text() for c in fills.precondition] == ["first_in_step = True"]
    assert fills.domain["requires_grad"] == [True]
    assert fills.domain["dtype"] == ["float32"]


@pytest.mark.slow
def test_invariants_file_is_deterministic(runs, tmp_path):
    first, files1 = infer_invariants([runs["reference"], runs["frozen_reference"]])
    second, files2 = infer_invariants([runs["frozen_reference"], runs["reference"]])
    write_invariants(first, tmp_path / "a.json", [str(f) for f in files1])
    write_invariants(second, tmp_path / "b.json", [str(f) for f in files2])
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert [i.id for i in read_invariants(tmp_path / "a.json")] == [i.id for i in first]


@pytest.mark.slow
def test_clean_variants_violate_nothing(runs):
    invariants, _ = infer_invariants([runs["reference"], runs["frozen_reference"]])
    assert check_offline(invariants, [runs["clean_sgd"]]) == []
    assert check_offline(invariants, [runs["clean_frozen"]]) == []
    assert check_offline(invariants, [runs["clean_accumulation"]]) == []


@pytest.mark.slow
def test_forgotten_zero_grad_is_caught_in_the_first_iteration_it_matters(runs):
    invariants, _ = infer_invariants([runs["reference"], runs["frozen_reference"]])
    all_violations = check_offline(invariants, [runs["bug_no_zero_grad"]])
    violations = [v for v in all_violations if v["relation"] == "StateTransition"]
    assert violations and violations[0]["step"] == 1  # step 0 had no stale grads yet
    assert all("backward finds the grad None or zero" in v["message"] for v in violations)
    # The loop itself: no zero_grad between two steps, from the second step on.
    sequence = [v for v in all_violations if v["relation"] == "APISequence"]
    assert [v["step"] for v in sequence] == [1, 2, 3]
    assert all(v["api"] == "torch.optim.Optimizer.zero_grad" for v in sequence)
    # And the step applies the stale grads: every parameter, from the second step on.
    cleared = [v for v in all_violations if v["relation"] == "GradCleared"]
    assert [v["step"] for v in cleared] == [1] * 6 + [2] * 6 + [3] * 6
    assert {v["relation"] for v in all_violations} == {"StateTransition", "APISequence", "GradCleared"}
    assert {v["variable"] for v in violations if v["step"] == 1} == {
        "model.backbone.0.weight", "model.backbone.0.bias", "model.backbone.2.weight", "model.backbone.2.bias",
        "model.head.weight", "model.head.bias"}


@pytest.mark.slow
def test_optimizer_over_frozen_parameters_is_caught_in_the_first_step(runs):
    """The optimizer holds the frozen backbone: its parameters have no grads, so the step leaves
    them alone as it would in a correct fine-tune; the fault is that the head gets grads that no
    step applies (GradApplied), on the head's parameters, from step 0."""
    invariants, _ = infer_invariants([runs["reference"], runs["frozen_reference"]])
    violations = check_offline(invariants, [runs["bug_frozen_optimizer"]])
    unapplied = [v for v in violations if v["relation"] == "GradApplied"]
    assert unapplied and min(v["step"] for v in unapplied) == 0
    assert {v["variable"] for v in unapplied} == {"model.head.weight", "model.head.bias"}
    assert not [v for v in violations if "optimizer.step changes the data" in v["message"]]



@pytest.mark.slow
def test_cli_infer_and_show(runs, tmp_path):
    out = tmp_path / "inv.json"
    cmd = [sys.executable, "-m", "traincheck_agent", "infer", str(runs["reference"]), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["format"] == "traincheck-invariants"
    show = subprocess.run([sys.executable, "-m", "traincheck_agent", "invariants", "show", str(out), "--api",
                           "zero_grad"], capture_output=True, text=True)
    assert show.returncode == 0 and "zero_grad leaves the grad None or zero" in show.stdout
    assert all("zero_grad" in line for line in show.stdout.splitlines()[:-1])


@pytest.mark.slow
def test_inference_progress_bar(runs, tmp_path):
    def infer(*flags):
        cmd = [sys.executable, "-m", "traincheck_agent", "infer", str(runs["reference"]), "-o", str(tmp_path / "i.json"), *flags]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr

    # Text mode reads the bar's carriage returns as newlines; what infer could not learn follows.
    shown = infer("--progress").split("[traincheck]")[0].split()
    assert "[" + "#" * 30 + "]" in shown and shown[-3:] == ["100%", "reading", "traces"]
    assert "#" not in infer() and "\r" not in infer()  # not a terminal, not asked for


ONE_STEP = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
x, y = torch.randn(16, 6), torch.randn(16, 1)
model.zero_grad()
torch.nn.functional.mse_loss(model(x), y).backward()
with torch.no_grad():
    for p in model.parameters():
        p.add_(p.grad, alpha=-0.05)  # one update by hand, and no more
"""


@pytest.mark.slow
def test_cli_infer_says_what_it_could_not_learn_and_why(runs, tmp_path):
    script = tmp_path / "one_step.py"
    script.write_text(ONE_STEP)
    trace = tmp_path / "one_step"
    assert run_python([str(script)], agent_env("collect", trace)).returncode == 0

    def infer(path):
        cmd = [sys.executable, "-m", "traincheck_agent", "infer", str(path), "-o", str(tmp_path / "i.json")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr.splitlines()

    manual = infer(trace)
    [short] = [line for line in manual if "warning" in line]
    assert "shows 1 training step(s)" in short and "optimizer.step" in short
    assert "[traincheck] CrossRankConsistent: nothing learned; no examples: it needs state snapshots of two or " \
           "more ranks" in manual
    assert any(line.startswith("[traincheck] StateTransition: nothing learned;") for line in manual), manual
    reference = infer(runs["reference"])
    assert not [line for line in reference if "warning" in line]
    assert not any(line.startswith("[traincheck] StateTransition:") for line in reference), reference


@pytest.mark.slow
@pytest.mark.parametrize(("content", "problem"), [
    ("{not json", "line 1: not valid JSON"),
    ('{"format": "other"}', "not a traincheck invariants file"),
    ('{"format": "traincheck-invariants", "version": 7, "invariants": []}', "version: unsupported version 7"),
    ('{"format": "traincheck-invariants", "version": 1, "invariants": [3]}', "invariants[0]: expected an object"),
    ('{"format": "traincheck-invariants", "version": 1, "invariants": [{"relation": "X", "subject": {}, '
     '"precondition": [1]}]}', "invariants[0].precondition[0]: expected an object with field and value"),
    ('{"format": "traincheck-invariants", "version": 1, "invariants": [{"relation": "X", "subject": {}, '
     '"precondition": [{"kind": "LIKE", "field": "a", "value": 1}]}]}', "invariants[0]: malformed: unknown clause kind 'LIKE'"),
])
def test_malformed_invariants_files(tmp_path, content, problem):
    path = tmp_path / "inv.json"
    path.write_text(content)
    with pytest.raises(InvariantFileError) as err:
        read_invariants(path)
    assert str(err.value).startswith(f"{path}: ") and problem in str(err.value)
    proc = subprocess.run([sys.executable, "-m", "traincheck_agent", "invariants", "show", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and problem in proc.stderr


def _torchrun(root: Path, name: str, script: str, *args: str) -> Path:
    out = root / name
    cmd = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", str(PIPELINES / script), *args]
    proc = run_python(cmd, agent_env("collect", out, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr
    return out


def _cross_rank(invariants):
    return {(i.subject["event"], i.subject["attribute"]): i for i in invariants if i.relation == "CrossRankConsistent"}


@pytest.mark.slow
def test_ddp_replicas_are_equal_across_ranks(tmp_path, torchrun_traces):
    invariants, _ = infer_invariants([torchrun_traces("ddp_train.py", "--steps", "6")])
    found = _cross_rank(invariants)
    equal_data = found[("after:optimizer.step", "data")]
    assert equal_data.precondition == () and equal_data.support["variables"] == 4
    # DDP all-reduces the grads, in every backward the reference had (none inside no_sync).
    assert [c.text() for c in found[("after:backward", "grad")].precondition] == ["grad_sync = True"]
    # Gradient accumulation with no_sync: the first backward's grads stay local, by design.
    no_sync = _torchrun(tmp_path, "ddp_no_sync", "ddp_train.py", "--accumulate", "2", "--seed", "3")
    assert check_offline(invariants, [no_sync]) == []
    # Casting the wrapped model to half and back loses DDP's gradient hooks: the ranks' grads
    # are no longer averaged, and the replicas drift from the first backward on.
    drift = check_offline(invariants, [torchrun_traces("ddp_train.py", "--bug", "dtype-roundtrip")])
    first = [v for v in drift if v["step"] == 0 and v["relation"] == "CrossRankConsistent"]
    assert first and {v["variable"] for v in first} >= {"model.0.weight", "model.2.weight"}
    assert any("after:backward" in v["message"] for v in first)


@pytest.mark.slow
def test_ranks_loading_the_same_batches_are_caught(tmp_path, torchrun_traces):
    """Without a DistributedSampler every rank trains on the same batches: DDP keeps the
    replicas equal, so only the batch fingerprints across ranks show it."""
    invariants, _ = infer_invariants([torchrun_traces("ddp_train.py", "--steps", "6")])
    distinct = {i.subject["position"]: i for i in invariants if i.relation == "CrossRankValue"}
    assert set(distinct) == {"ret.items[0]", "ret.items[1]"} and distinct["ret.items[0]"].id.startswith("cv-")
    assert all(i.subject["form"] == "distinct" for i in distinct.values())
    bug = _torchrun(tmp_path, "bug", "ddp_train.py", "--steps", "6", "--bug", "same-data")
    violations = check_offline(invariants, [bug])
    assert {v["relation"] for v in violations} == {"CrossRankValue"}
    assert violations[0]["step"] == -1 and violations[0]["ranks"] == [0, 1]  # the very first batch
    assert "ranks [0, 1] got the same value" in violations[0]["message"]
    assert check_offline(invariants, [torchrun_traces("ddp_train.py", "--steps", "8", "--seed", "1")]) == []


@pytest.mark.slow
def test_tensor_parallel_replicated_parameters_only_and_the_bloom_bug(tmp_path, torchrun_traces):
    reference = torchrun_traces("tp_train.py", "--steps", "6")
    invariants, _ = infer_invariants([reference])
    equal_data = _cross_rank(invariants)[("after:optimizer.step", "data")]
    assert [c.text() for c in equal_data.precondition] == ["tensor_model_parallel = False"]
    assert equal_data.support["variables"] == 2  # the LayerNorm weight and bias, never the shards
    buggy = torchrun_traces("tp_train.py", "--bug", "clip-on-one-rank")
    violations = [v for v in check_offline(invariants, [buggy]) if v["relation"] == "CrossRankConsistent"]
    first = [v for v in violations if v["invariant"] == equal_data.id and v["step"] == 0]
    assert {v["variable"] for v in first} == {"model.0.weight", "model.0.bias"}
    assert all(v["ranks"] == [0, 1] for v in first)
    assert check_offline(invariants, [_torchrun(tmp_path, "tp_clean", "tp_train.py", "--steps", "4")]) == []


@pytest.mark.slow
def test_output_dtype_follows_the_autocast_context(tmp_path):
    from traincheck_agent.examples import transformer_lm

    refs = []
    for name, extra in (("bf16", ["--autocast", "bf16"]), ("fp32", [])):
        out = tmp_path / name
        collect_in_process(transformer_lm.__file__, out, "--steps", "4", *extra)
        refs.append(out)
    invariants, _ = infer_invariants(refs)
    linear = {i.subject["value"]: i for i in invariants
              if i.relation == "ConsistentOutput" and i.subject["api"] == "torch.nn.Linear.forward"}
    # Inside autocast, Linear inputs are float32 or already bfloat16: no input-dtype scope.
    assert [c.text() for c in linear["bfloat16"].precondition] == ["autocast = cpu:bfloat16"]
    assert [c.text() for c in linear["float32"].precondition] == ["autocast = None", "input.dtype = float32"]
    # A clean variant (other seed and batch size, autocast on) breaks none of them.
    variant = tmp_path / "variant"
    collect_in_process(transformer_lm.__file__, variant, "--steps", "3", "--autocast", "bf16", "--seed", "4",
                       "--batch-size", "4")
    assert check_offline(invariants, [variant]) == []
    # The last block's MLP output projection computes in float32 with autocast switched off.
    bug = tmp_path / "bug"
    collect_in_process(transformer_lm.__file__, bug, "--steps", "2", "--autocast", "bf16", "--bug", "escape-autocast")
    violations = check_offline(invariants, [bug])
    assert violations and violations[0]["step"] == 0
    assert {(v["relation"], v["variable"]) for v in violations} == {("ConsistentOutput", "model.blocks.1.mlp")}
    assert "returned float32" in violations[0]["message"]


def test_a_parameter_initialised_twice_is_caught(tmp_path):
    refs = [collect_mlp_here(tmp_path, f"ref{seed}", "--steps", "3", "--init", "normal", "--seed", str(seed)) for seed in (0, 4)]
    invariants, _ = infer_invariants(refs)
    distinct = [i for i in invariants if i.relation == "DistinctArgument" and i.subject["api"] == "torch.nn.init.normal_"]
    assert len(distinct) == 1 and distinct[0].subject["argument"] == "tensor"
    buggy = collect_mlp_here(tmp_path, "bug", "--steps", "3", "--bug", "double-init")
    violations = [v for v in check_offline(invariants, [buggy]) if v["relation"] == "DistinctArgument"]
    # Once for normal_ itself, once for the initialisers' family.
    assert len(violations) == 2 and {v["step"] for v in violations} == {-1}
    messages = " | ".join(v["message"] for v in violations)
    assert "torch.nn.init.normal_ received the same parameter" in messages
    assert "torch.nn.init.normal_ initialised parameter" in messages
    assert check_offline(invariants, [collect_mlp_here(tmp_path, "clean", "--steps", "2", "--init", "normal", "--seed", "9")]) == []


@pytest.mark.slow
def test_evaluating_before_any_training_forward_is_caught(tmp_path):
    """Spectral norm's power iteration and BatchNorm's running statistics only advance in
    training forwards: an evaluation before the first one uses their initial values."""
    script = str(PIPELINES / "spectral_train.py")

    def collect(name, *args):
        out = tmp_path / name
        collect_in_process(script, out, *args)
        return out

    invariants, _ = infer_invariants([collect("ref", "--seed", "0"), collect("ref2", "--seed", "1", "--eval-every", "2")])
    leads = {i.subject["api"]: i for i in invariants if i.relation == "APISequence" and i.subject["form"] == "leads"}
    assert set(leads) == {"torch.nn.utils.spectral_norm.SpectralNorm.compute_weight", "torch.nn.functional.batch_norm"}
    assert leads["torch.nn.functional.batch_norm"].id.startswith("as-")
    covers = {i.subject["api"] for i in invariants if i.relation == "APISequence" and i.subject["form"] == "covers"}
    assert {"torch.optim.Optimizer.zero_grad", "torch.Tensor.backward"} <= covers
    violations = check_offline(invariants, [collect("bug", "--bug", "eval-before-train", "--seed", "4")])
    assert {(v["api"], v["variable"], v["step"]) for v in violations} == {
        ("torch.nn.utils.spectral_norm.SpectralNorm.compute_weight", "model.0", -1),
        ("torch.nn.utils.spectral_norm.SpectralNorm.compute_weight", "model.3", -1),
        ("torch.nn.functional.batch_norm", "", -1)}
    assert check_offline(invariants, [collect("clean", "--seed", "5", "--steps", "5", "--eval-every", "1")]) == []


@pytest.mark.slow
def test_dropout_left_on_in_eval_is_caught_at_the_first_eval(tmp_path):
    from traincheck_agent.examples import cnn_train

    def collect_cnn(name, *args):
        out = tmp_path / name
        collect_in_process(cnn_train.__file__, out, *args)
        return out

    refs = [collect_cnn("ref", "--steps", "12", "--eval-every", "4"),
            collect_cnn("ref2", "--steps", "12", "--eval-every", "3", "--seed", "2")]
    invariants, _ = infer_invariants(refs)
    flags = {i.subject["value"]: i for i in invariants
             if i.relation == "ContextArgument" and i.subject["api"] == "torch.nn.functional.dropout"}
    assert set(flags) == {False, True} and flags[False].id.startswith("ca-")
    contains = {(i.subject["api"], i.subject["child"]) for i in invariants if i.relation == "EventContain"}
    assert {("torch.nn.Dropout.forward", "torch.nn.functional.dropout"),
            ("torch.nn.BatchNorm2d.forward", "torch.nn.functional.batch_norm"),
            ("torch.Tensor.backward", "torch.autograd.backward")} <= contains
    assert not any(api.startswith("__main__") for api, _ in contains)  # submodule calls are architecture
    keeps = {(i.subject["api"], i.subject["dim"]) for i in invariants if i.relation == "ConsistentInputOutput"}
    # Training batches of 32, evaluation batches of 256: every layer keeps the batch dim.
    assert {("torch.nn.Linear.forward", 0), ("torch.nn.Conv2d.forward", 0), ("torch.nn.Dropout.forward", 0)} <= keeps
    assert [c.text() for c in flags[False].precondition] == ["module_training = False"]
    buggy = collect_cnn("bug", "--steps", "8", "--eval-every", "4", "--bug", "dropout-in-eval")
    violations = [v for v in check_offline(invariants, [buggy]) if v["relation"] == "ContextArgument"]
    assert [v["step"] for v in violations] == [4, 8]  # every eval, from the first one
    assert all("torch.nn.functional.dropout is called with training=False" in v["message"] for v in violations)
    clean = collect_cnn("clean", "--steps", "6", "--eval-every", "2", "--seed", "7", "--batch-size", "16")
    assert check_offline(invariants, [clean]) == []
    # SGD instead of Adam: conv1 feeds BatchNorm, so its bias's grad is rounding noise and a step
    # leaves it bit-identical; the fingerprints' magnitudes mark that update as negligible.
    sgd = collect_cnn("sgd", "--steps", "6", "--optimizer", "sgd", "--eval-every", "3")
    assert check_offline(invariants, [sgd]) == []


def test_an_update_below_the_data_resolution_is_negligible():
    from traincheck_agent.inference.examples import update_negligible

    def attrs(dtype, data, grad):
        return {"dtype": dtype, "data": {"h": "x3:0", "amax": data}, "grad": {"h": "x3:1", "amax": grad}}

    assert update_negligible(attrs("float32", 0.29, 3e-8))  # the BatchNorm-fed conv bias
    assert not update_negligible(attrs("float32", 0.29, 1e-4))
    assert update_negligible(attrs("bfloat16", 1.0, 0.1))  # bf16 resolves far less
    assert not update_negligible({"dtype": "float32", "data": {"h": "tw:0"}, "grad": {"h": "tw:1"}})  # no magnitudes
    assert not update_negligible({"dtype": "float32", "data": {"h": "x3:0", "amax": 1.0}, "grad": None})


def test_preferred_fields_win_ties_between_equally_separating_clauses():
    from traincheck_agent.inference.preconditions import deduce

    passing = [{"grad_enabled": False, "module_training": False}] * 3
    failing = [{"grad_enabled": True, "module_training": True}] * 3
    assert [c.field for c in deduce(passing, failing)] == ["grad_enabled"]  # alphabetical
    assert [c.field for c in deduce(passing, failing, ("module_training",))] == ["module_training"]


def test_inverted_disjunctive_and_existence_clauses():
    from traincheck_agent.inference.preconditions import Clause, deduce

    def texts(clauses):
        return [c.text() for c in clauses]

    # "except in eval": passing examples come from two phases, failing ones only from eval.
    passing = [{"phase": "init"}, {"phase": "train"}, {"phase": "train"}]
    assert texts(deduce(passing, [{"phase": "eval"}])) == ["phase != eval"]
    # A disjunction when some failing value is also unseen: [init, train] rules out both.
    both = deduce(passing, [{"phase": "eval"}, {"phase": "other"}])
    assert texts(both) == ["phase in [init, train]"]
    # Inside any autocast context, whatever its dtype.
    autocast = [{"autocast": "cpu:bfloat16"}, {"autocast": "cuda:float16"}]
    assert texts(deduce(autocast, [{"autocast": None}])) == ["autocast is set"]
    # Multi-rank examples: equal only where the shard shapes agree on every rank.
    equal = [{"parties.shape": ((4, 8), (4, 8)), "parties.rank": (0, 1)}] * 3
    uneven = [{"parties.shape": ((5, 8), (3, 8)), "parties.rank": (0, 1)}]
    consistent = deduce(equal, uneven)
    assert texts(consistent) == ["shape is the same on every rank"]
    assert texts(deduce(uneven * 3, equal)) == ["shape differs between ranks"]
    for clause in [*both, *consistent, Clause("autocast", None, "EXIST"), Clause("phase", "eval", "NOT")]:
        assert Clause.from_json(json.loads(json.dumps(clause.to_json()))) == clause


def test_a_layer_that_mixes_up_the_batch_dimension_is_caught():
    from traincheck_agent.inference.relations import input_output

    def call(batch, out_batch, step):
        return input_output.ShapeExample("m.Layer.forward", "0", (batch, 8), (out_batch, 4), step, "t", (("phase", "train"),))

    reference = {"m.Layer.forward": [call(b, b, s) for s, b in enumerate([32, 32, 32, 256, 32, 256])]}
    [inv] = input_output.infer(reference, ())
    assert inv.subject == {"api": "m.Layer.forward", "dim": 0} and inv.id.startswith("io-")
    assert "ret.shape[0] == args[0].shape[0]" in inv.description
    [bad] = stream.check(input_output, inv, {"m.Layer.forward": [call(16, 16, 0), call(16, 8, 1)]})
    assert bad.step == 1 and "dim 0: 8 vs 16" in input_output.violation(inv, bad)["message"]
    constant = {"m.Layer.forward": [call(32, 32, s) for s in range(6)]}
    assert input_output.infer(constant, ()) == []  # one batch size: nothing learned about it
