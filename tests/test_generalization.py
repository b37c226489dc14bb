"""Invariants hold beyond the pipelines they were learned from: each failure class of checking a
program unlike the references, pinned with a small real training run.

- mixing references of different pipelines (DDP and tensor parallelism) keeps the cross-rank
  equality each supports;
- ranks a script starts itself with ``torch.multiprocessing.spawn`` are checked online;
- an ordering invariant about a class the program does not have (``MLP``) is not judged;
- frozen parameters and blocks skipped by stochastic depth are none of backward's business;
- a conv under autocast is outside what float32 references showed;
- an inference-only script is not judged by training-order invariants;
- a weight initialised twice through ``.data`` is the same parameter both times;
- a custom-initialised layer that a generic init loop initialises again is caught, although
  the two initialisers differ;
- a module that slips out of the autocast region is caught by name, and a run without
  autocast at all is outside those invariants' domain;
- a dropout left at its default ``training=True`` in evaluation is caught (defaults of
  boolean parameters are recorded);
- an init applied twice through ``model.apply`` is caught, and training left in eval mode
  after an evaluation is caught at the first step it takes;
- a second optimizer that steps after the clock's still applies its grads, and a zero learning
  rate (a warm-up, a scheduler inside DeepSpeed's step) changes nothing;

and the preconditions and the monotone merging underneath, on plain examples.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import (
    PIPELINES,
    agent_env,
    collect_in_process,
    collect_mlp_here,
    read_traces,
    run_parallel,
)

from traincheck_agent.check.offline import check_offline
from traincheck_agent.examples import cnn_train
from traincheck_agent.inference.call_context import MODE_SETTERS
from traincheck_agent.inference.coverage import Coverage
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import (
    Invariant,
    InvariantFileError,
    read_invariants,
    write_invariants,
)
from traincheck_agent.inference.preconditions import (
    ABSENT,
    ANY,
    NOT,
    Clause,
    deduce,
    deduce_scopes,
    domain_of,
    outside_domain,
)

SD = str(PIPELINES / "stochastic_depth_train.py")
RESIDUAL = str(PIPELINES / "residual_mlp_train.py")
MLP = str(PIPELINES / "mlp_train.py")
CNN = cnn_train.__file__
TORCHRUN = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone"]


def _collect(root: Path, runs: dict[str, list[str]]) -> dict[str, Path]:
    """Collect every run side by side (one process each, or torchrun with 2 ranks)."""
    outs = {name: root / name for name in runs}
    procs = run_parallel(*((args, agent_env("collect", outs[name], OMP_NUM_THREADS="1"))
                           for name, args in runs.items()), timeout=300)
    for name, proc in zip(runs, procs, strict=True):
        assert proc.returncode == 0, f"{name}: {proc.stderr[-2000:]}"
    return outs


def _collect_here(root: Path, runs: dict[str, list[str]]) -> dict[str, Path]:
    """``_collect`` for single-process runs, one after another in this process."""
    outs = {name: root / name for name in runs}
    for name, (script, *args) in runs.items():
        collect_in_process(script, outs[name], *args, threads=1)
    return outs


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("single")
    runs = _collect_here(root, {
        "mlp": [MLP, "--steps", "8"],
        "sd_ref": [SD, "--steps", "8"],
        "sd_drop": [SD, "--steps", "8", "--drop-prob", "0.5", "--seed", "1"],
        "sd_frozen": [SD, "--steps", "6", "--freeze-first", "--seed", "2"],
    })
    runs.update(_collect_here(root, {
        "cnn": [CNN, "--steps", "8", "--eval-every", "2", "--optimizer", "adadelta"],
        "cnn2": [CNN, "--steps", "8", "--eval-every", "3", "--optimizer", "adadelta", "--seed", "2"],
        "cnn_bf16": [CNN, "--steps", "6", "--eval-every", "2", "--optimizer", "adadelta", "--autocast", "bf16",
                     "--seed", "3"],
        "inference_only": [str(PIPELINES / "inference_only.py")],
    }))
    return runs


def _check(references: list[Path], target: Path) -> tuple[list[Invariant], list[dict], Coverage]:
    invariants, _ = infer_invariants(references)
    coverage = Coverage()
    return invariants, check_offline(invariants, [target], coverage=coverage), coverage


@pytest.mark.slow
def test_a_model_without_mlp_is_not_judged_by_mlp_ordering(single):
    """Learned from an MLP script: "MLP.forward (and cross_entropy) is called between steps".
    A residual net trained with MSE has neither: not covered, never a violation."""
    invariants, violations, coverage = _check([single["mlp"]], single["sd_ref"])
    assert any(i.relation == "APISequence" and "MLP.forward" in i.subject["api"] for i in invariants)
    assert violations == []
    reasons = set(coverage.reasons.values())
    assert "no MLP object in this run" in reasons
    assert "a program that never calls it" in reasons  # cross_entropy


@pytest.mark.slow
def test_frozen_blocks_and_stochastic_depth_stay_quiet(single):
    """A block skipped for the whole batch gets no grad, and a frozen block (handed to the
    optimizer all the same) neither: backward and step leave them alone."""
    for target in ("sd_drop", "sd_frozen"):
        _, violations, _ = _check([single["sd_ref"]], single[target])
        assert violations == [], target


@pytest.mark.slow
def test_conv_under_autocast_is_outside_float32_references(single):
    invariants, violations, coverage = _check([single["cnn"]], single["cnn_bf16"])
    conv = [i for i in invariants if i.relation == "ConsistentOutput" and i.subject["api"] == "torch.nn.Conv2d.forward"]
    assert conv and conv[0].subject["value"] == "float32" and conv[0].domain["autocast"] == [None]
    assert violations == []
    assert coverage.outside[conv[0].id] > 0
    assert coverage.reasons[conv[0].id] == "autocast=cpu:bfloat16 never seen"
    assert "outside the references' domain (autocast=cpu:bfloat16 never seen for torch.nn." in coverage.summary(
        {i.id: i for i in invariants})


@pytest.mark.slow
def test_an_inference_only_script_is_not_judged_by_training_order(single):
    """Dropout and batch norm are first called in training mode in every reference; a script
    that only evaluates never trains, so those sightings are not covered."""
    invariants, violations, coverage = _check([single["cnn"], single["cnn2"]], single["inference_only"])
    leads = [i for i in invariants if i.relation == "APISequence" and i.subject["form"] == "leads"]
    assert {i.subject["api"] for i in leads} >= {"torch.nn.functional.dropout"}
    assert violations == []
    assert any(coverage.outside.get(i.id) and coverage.reasons[i.id] == "a program that never trains" for i in leads)


@pytest.mark.slow
def test_reinitialising_a_weight_through_data_is_caught(tmp_path):
    """``p.data`` is a new tensor object at each access; the init routine's second
    ``p.data.normal_()`` on the same weight is still the same parameter, given twice."""
    runs = _collect_here(tmp_path, {
        "ref1": [MLP, "--steps", "3", "--init", "data-normal"],
        "ref2": [MLP, "--steps", "3", "--init", "data-normal", "--seed", "4"],
        "bug": [MLP, "--steps", "2", "--bug", "double-init-data"],
        "clean": [MLP, "--steps", "2", "--init", "data-normal", "--seed", "9"],
    })
    invariants, _ = infer_invariants([runs["ref1"], runs["ref2"]])
    assert any(i.relation == "DistinctArgument" and i.subject["api"] == "torch.Tensor.normal_" for i in invariants)
    found = [v for v in check_offline(invariants, [runs["bug"]]) if v["relation"] == "DistinctArgument"]
    # normal_ itself, and the initialisers' family (the same second call)
    assert [v["step"] for v in found] == [-1, -1] and {v["api"] for v in found} == {"torch.Tensor.normal_"}
    assert check_offline(invariants, [runs["clean"]]) == []


def test_grads_cleared_at_the_top_of_each_iteration_against_references_that_clear_after_the_step(tmp_path):
    """Two correct places to clear grads: references that call ``zero_grad`` after the step
    never call it on grads that are still None, which a loop that clears at the top of each
    iteration does before its first backward. Nothing to change there is no violation of
    "zero_grad changes the grad"; a loop that never clears is still caught by step 1."""
    refs = [collect_mlp_here(tmp_path, f"ref{seed}", "--steps", "6", "--seed", str(seed), "--zero-grad-at", "end")
            for seed in (0, 1)]
    invariants, _ = infer_invariants(refs)
    changes = {"event": "zero_grad", "attribute": "grad", "effect": "changed"}
    assert any(i.relation == "StateTransition" and i.subject == changes for i in invariants)
    top_of_loop = collect_mlp_here(tmp_path, "top", "--steps", "4", "--seed", "3")
    assert check_offline(invariants, [top_of_loop]) == []
    found = check_offline(invariants, [collect_mlp_here(tmp_path, "bug", "--steps", "4", "--seed", "3",
                                                        "--zero-grad-at", "end", "--bug", "no-zero-grad")])
    assert found and min(v["step"] for v in found) <= 1


def test_zero_grad_that_finds_no_grads_is_outside_what_references_that_always_had_grads_showed(tmp_path):
    """``zero_grad(set_to_none=False)`` zeroes each grad with ``Tensor.zero_``; at the top of
    the first iteration there is none, so it calls nothing. References that clear after the
    step never made such a call: it is outside their invariant's domain, counted and never a
    violation, as is a call given another ``set_to_none``. References that clear at the top
    learn the invariant on calls that found grads."""
    common = ("--grads-to-zero", "--optimizer", "sgd")
    end_refs = [collect_mlp_here(tmp_path, f"end{seed}", "--steps", "6", "--seed", str(seed), *common,
                                 "--zero-grad-at", "end") for seed in (0, 1)]
    invariants, _ = infer_invariants(end_refs)
    zeroes = [i for i in invariants if i.relation == "EventContain" and i.subject["child"] == "torch.Tensor.zero_"]
    assert [i.subject.get("snapshot") for i in zeroes] == ["before:zero_grad"]
    assert zeroes[0].support["found_no_grads"] == 0
    top_of_loop = collect_mlp_here(tmp_path, "top", "--steps", "4", "--seed", "3", *common)
    coverage = Coverage()
    assert check_offline(invariants, [top_of_loop], coverage=coverage) == []
    assert coverage.outside.get(zeroes[0].id) == 1
    # zero_grad(set_to_none=True) drops the grads instead: what it calls is another matter,
    # outside what references that zeroed them showed.
    dropping = collect_mlp_here(tmp_path, "drop", "--steps", "4", "--seed", "3", "--optimizer", "sgd",
                                "--zero-grad-at", "end")
    coverage = Coverage()
    assert check_offline(invariants, [dropping], coverage=coverage) == []
    assert coverage.reasons[zeroes[0].id] == "arg.set_to_none=True never seen"

    start_refs = [collect_mlp_here(tmp_path, f"start{seed}", "--steps", "6", "--seed", str(seed), *common)
                  for seed in (0, 1)]
    learned = [i for i in infer_invariants(start_refs)[0]
               if i.relation == "EventContain" and i.subject["child"] == "torch.Tensor.zero_"]
    assert [str(c.value) for i in learned for c in i.precondition if c.field == "before.grads"] == ["present"]


def test_grads_cleared_through_the_model_against_references_that_clear_through_the_optimizer(tmp_path):
    """``model.zero_grad()`` clears what ``optimizer.zero_grad()`` clears: an iteration that calls
    the one where the references called the other is not covered by "zero_grad is called between
    two steps", and a loop that clears nothing is still caught by it."""
    refs = [collect_mlp_here(tmp_path, f"ref{seed}", "--steps", "6", "--seed", str(seed)) for seed in (0, 1)]
    invariants, _ = infer_invariants(refs)
    between = [i for i in invariants if i.relation == "APISequence"
               and i.subject.get("api") == "torch.optim.Optimizer.zero_grad"]
    assert len(between) == 1
    coverage = Coverage()
    via_model = collect_mlp_here(tmp_path, "model", "--steps", "4", "--seed", "3", "--zero-grad-via", "model")
    assert check_offline(invariants, [via_model], coverage=coverage) == []
    assert coverage.reasons[between[0].id] == "zero_grad called as torch.nn.Module.zero_grad"
    forgotten = check_offline(invariants, [collect_mlp_here(tmp_path, "bug", "--steps", "4", "--seed", "3",
                                                            "--bug", "no-zero-grad")])
    assert {v["step"] for v in forgotten if v["invariant"] == between[0].id} == {1, 2, 3}


@pytest.fixture(scope="module")
def residual(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("residual")
    runs = _collect_here(root, {
        "ref": [RESIDUAL, "--steps", "8"],
        "ref2": [RESIDUAL, "--steps", "6", "--seed", "1", "--eval-every", "2"],
        "amp": [RESIDUAL, "--steps", "8", "--autocast"],
        "amp2": [RESIDUAL, "--steps", "6", "--seed", "1", "--autocast"],
    })
    runs.update(_collect_here(root, {
        "init_bug": [RESIDUAL, "--steps", "2", "--seed", "2", "--bug", "init-overwrite"],
        "escape_bug": [RESIDUAL, "--steps", "4", "--seed", "2", "--autocast", "--bug", "autocast-escape"],
        "dropout_bug": [RESIDUAL, "--steps", "6", "--seed", "2", "--bug", "dropout-default"],
        "amp_clean": [RESIDUAL, "--steps", "5", "--seed", "3", "--autocast", "--width", "8"],
    }))
    runs.update(_collect_here(root, {
        "apply": [RESIDUAL, "--steps", "4", "--init", "apply"],
        "apply2": [RESIDUAL, "--steps", "4", "--init", "apply", "--seed", "1"],
        "double_apply": [RESIDUAL, "--steps", "2", "--init", "apply", "--seed", "2", "--bug", "double-apply"],
        "left_in_eval": [RESIDUAL, "--steps", "6", "--seed", "2", "--bug", "left-in-eval"],
    }))
    runs.update(_collect_here(root, {
        "two": [RESIDUAL, "--steps", "8", "--two-optimizers"],
        "two2": [RESIDUAL, "--steps", "6", "--two-optimizers", "--seed", "1"],
        "two_clean": [RESIDUAL, "--steps", "5", "--two-optimizers", "--seed", "3", "--lr", "0.005"],
    }))
    return runs


@pytest.mark.slow
def test_a_custom_init_that_a_generic_init_loop_repeats_is_caught(residual):
    """The custom layer initialises itself with ``normal_`` / ``zero_``; an ``isinstance``
    match in the model's init loop then gives it ``xavier_uniform_`` / ``zeros_`` too. No API
    sees a parameter twice, the initialisers' family does; a layer's default initialisation
    (inside its ``reset_parameters``) does not count."""
    invariants, _ = infer_invariants([residual["ref"], residual["ref2"]])
    family = [i for i in invariants if i.relation == "DistinctArgument" and i.subject["api"] == "initialisers"]
    assert family and "torch.nn.init.xavier_uniform_" in family[0].subject["family"]
    found = [v for v in check_offline(invariants, [residual["init_bug"]]) if v["relation"] == "DistinctArgument"]
    assert {v["step"] for v in found} == {-1}
    assert {v["api"] for v in found} == {"torch.nn.init.xavier_uniform_", "torch.nn.init.zeros_"}
    assert "(first by torch.Tensor.normal_)" in " ".join(v["message"] for v in found)


@pytest.mark.slow
def test_a_module_that_escapes_autocast_is_caught_by_name(residual):
    invariants, _ = infer_invariants([residual["amp"], residual["amp2"]])
    coverage = Coverage()
    found = [v for v in check_offline(invariants, [residual["escape_bug"]], coverage=coverage)
             if v["relation"] == "AutocastRegion"]
    assert found and {v["variable"] for v in found} == {"model.blocks.1.fc"} and min(v["step"] for v in found) == 0
    assert check_offline(invariants, [residual["amp_clean"]]) == []
    # A run with autocast switched off as a whole is outside what the references showed.
    region = [i for i in invariants if i.relation == "AutocastRegion"]
    assert region and all(i.domain["step_autocast"] == ["cpu:bfloat16"] for i in region)
    assert check_offline(region, [residual["ref"]]) == []


@pytest.mark.slow
def test_dropout_left_at_its_default_in_evaluation_is_caught(residual):
    invariants, _ = infer_invariants([residual["ref"], residual["ref2"]])
    found = [v for v in check_offline(invariants, [residual["dropout_bug"]]) if v["relation"] == "ContextArgument"]
    assert found and min(v["step"] for v in found) == 3
    assert all("called with training=True" in v["message"] and "phase eval" in v["message"] for v in found)
    assert check_offline(invariants, [residual["ref2"]]) == []
    # model.train() records mode=True now, eval() mode=False: a mode setter changes the
    # context, it does not follow it.
    assert not [i for i in invariants if i.relation == "ContextArgument" and i.subject["api"] in MODE_SETTERS]


@pytest.mark.slow
def test_an_init_applied_twice_through_module_apply_is_caught(residual):
    """``model.apply(init)`` nests every initialiser in a recorded call; they are judged all
    the same, while the fills inside an initialiser or a ``reset_parameters`` are not."""
    invariants, _ = infer_invariants([residual["apply"], residual["apply2"]])
    assert any(i.relation == "DistinctArgument" and i.subject["api"] == "torch.nn.init.kaiming_uniform_"
               for i in invariants)
    found = [v for v in check_offline(invariants, [residual["double_apply"]]) if v["relation"] == "DistinctArgument"]
    assert found and {v["step"] for v in found} == {-1}
    assert "torch.nn.init.kaiming_uniform_" in {v["api"] for v in found}


@pytest.mark.slow
def test_training_left_in_eval_mode_is_caught_at_the_first_step_it_takes(residual):
    invariants, _ = infer_invariants([residual["ref"], residual["ref2"]])
    mode = [i for i in invariants if i.relation == "UpdateMode"]
    assert [i.subject for i in mode] == [{"event": "optimizer.step", "model": "model", "phase": "train"}]
    found = check_offline(invariants, [residual["left_in_eval"]])
    assert found and found[0]["step"] == 3
    assert {v["step"] for v in found if v["relation"] == "UpdateMode"} == {3, 4, 5}


@pytest.mark.slow
def test_a_second_optimizer_stepped_after_the_clocks_applies_its_grads(residual):
    """The clock counts the first optimizer's step; the head's optimizer steps after it, in what
    the clock calls the next iteration. Its grads are applied all the same."""
    invariants, _ = infer_invariants([residual["two"], residual["two2"]])
    assert [i for i in invariants if i.relation == "GradApplied"]
    assert check_offline(invariants, [residual["two_clean"]]) == []


def test_a_zero_learning_rate_changes_nothing_and_the_rate_in_force_is_the_smaller():
    from traincheck_agent.inference.examples import LearningRates, update_negligible

    # ZeRO keeps grads in its partitions: no grad at the step, but a zero rate decides.
    assert update_negligible({"dtype": "float32", "data": {"amax": 1.0}}, 0.0)
    assert not update_negligible({"dtype": "float32", "data": {"amax": 1.0}}, 1e-3)
    rates = LearningRates()
    record = {"vtype": "param_group", "where": "after:optimizer.step", "var": "opt.param_groups.0"}
    assert rates.observe({**record, "attrs": {"lr": 0.0}}) == 0.0
    assert rates.observe({**record, "attrs": {"lr": 2e-3}}) == 0.0  # a warm-up stepped inside the step call
    assert rates.observe({**record, "attrs": {"lr": 3e-3}}) == 2e-3
    assert rates.observe({"vtype": "Parameter", "where": "after:optimizer.step"}) is None


def test_boolean_defaults_are_recorded():
    import torch
    import torch.nn.functional as F

    from traincheck_agent.agent.record.descriptors import arg_signature, describe_args
    from traincheck_agent.policy.model import DESCRIBE_SUMMARY

    signature = arg_signature(F.dropout, False)
    x = torch.zeros(2)
    assert describe_args(signature, (x, 0.1), {}, DESCRIBE_SUMMARY, {}, {})["training"] is True
    assert describe_args(signature, (x, 0.1, False), {}, DESCRIBE_SUMMARY, {}, {})["training"] is False
    assert describe_args(signature, (x,), {"training": False}, DESCRIBE_SUMMARY, {}, {})["training"] is False
    assert arg_signature(torch.Tensor.sum, True).flag_defaults == ((1, "keepdim", False),)  # from the docstring


@pytest.fixture(scope="module")
def ranks(tmp_path_factory, torchrun_traces) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ranks")
    tp = str(PIPELINES / "tp_train.py")
    runs = {"ddp": torchrun_traces("ddp_train.py", "--steps", "6"), "tp": torchrun_traces("tp_train.py", "--steps", "6"),
            "ddp_bug": torchrun_traces("ddp_train.py", "--bug", "dtype-roundtrip"),
            "tp_bug": torchrun_traces("tp_train.py", "--bug", "clip-on-one-rank")}
    runs["ddp_clean"] = torchrun_traces("ddp_train.py", "--steps", "8", "--seed", "1")
    runs.update(_collect(root, {"tp_unmarked": [*TORCHRUN, tp, "--steps", "6", "--unmarked"]}))
    runs.update(_collect(root, {"tp_unmarked_bug": [*TORCHRUN, tp, "--unmarked", "--bug", "clip-on-one-rank"]}))
    return runs


@pytest.mark.slow
def test_mixed_ddp_and_tensor_parallel_references_keep_cross_rank_equality(ranks):
    """DDP parameters carry no ``partition_dim``; the tensor-parallel shards do and differ
    across ranks. Pooled, "the data is equal on every rank" survives with a precondition that
    tells them apart, and both pipelines' replica drifts are caught at step 0."""
    invariants, _ = infer_invariants([ranks["ddp"], ranks["tp"]])
    equal = [i for i in invariants if i.relation == "CrossRankConsistent" and i.subject["attribute"] == "data"
             and i.subject["event"] == "after:optimizer.step"]
    assert equal
    for bug in ("ddp_bug", "tp_bug"):
        found = [v for v in check_offline(invariants, [ranks[bug]]) if v["relation"] == "CrossRankConsistent"]
        assert found and min(v["step"] for v in found) == 0, bug
    assert check_offline(invariants, [ranks["ddp_clean"]]) == []


@pytest.mark.slow
def test_replicated_parameters_of_an_unmarked_tensor_parallel_layout_are_named(ranks):
    """Without framework markings, a replicated LayerNorm and a shard look alike in every feature;
    pooled with DDP, no precondition tells the shards from the replicas. The variables that were
    equal on every rank in every reference keep an invariant that names them, so clipping on one
    rank is caught at step 0 and the DDP replicas' drift still is."""
    invariants, _ = infer_invariants([ranks["ddp"], ranks["tp_unmarked"]])
    named = [i for i in invariants if i.relation == "CrossRankConsistent" and "variables" in i.subject
             and i.subject["event"] == "after:optimizer.step" and i.subject["attribute"] == "data"]
    assert named and "model.0.weight" in named[0].subject["variables"]
    assert not any(name.startswith("model.1.") for name in named[0].subject["variables"])  # the shard
    for bug in ("tp_unmarked_bug", "ddp_bug"):
        found = [v for v in check_offline(invariants, [ranks[bug]]) if v["relation"] == "CrossRankConsistent"]
        assert found and min(v["step"] for v in found) == 0, bug
    assert check_offline(invariants, [ranks["ddp_clean"]]) == []


@pytest.mark.slow
def test_ranks_started_with_spawn_are_checked_online(tmp_path):
    """No launcher variables: the process group comes up inside the script. The cross-rank
    invariants are kept at start-up and checked once it is up."""
    script = str(PIPELINES / "spawn_ddp_train.py")
    ref, out = tmp_path / "ref", tmp_path / "check"
    [proc] = run_parallel(([script, "--steps", "6"], agent_env("collect", ref, OMP_NUM_THREADS="1")))
    assert proc.returncode == 0, proc.stderr
    assert len(list(ref.glob("trace_*.jsonl"))) == 2
    invariants, files = infer_invariants([ref])
    assert any(i.relation == "CrossRankConsistent" for i in invariants)
    inv = tmp_path / "inv.json"
    write_invariants(invariants, inv, [str(f) for f in files])
    [proc] = run_parallel(([script, "--steps", "4", "--bug", "dtype-roundtrip"],
                           agent_env("check", out, TRAINCHECK_INV=str(inv), OMP_NUM_THREADS="1")))
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for path in out.glob("violations-*.jsonl") for line in path.read_text().splitlines()]
    drift = [r for r in records if r.get("relation") == "CrossRankConsistent"]
    assert drift and min(r["step"] for r in drift) <= 1, proc.stderr
    assert "cross-rank invariants not checked" not in proc.stderr
    summaries = [line for line in proc.stderr.splitlines() if "check summary" in line]
    assert len(summaries) == 2 and {"(rank 0)", "(rank 1)"} <= {s.split(":")[0][-8:] for s in summaries}


# ------------------------------------------------------------ GradApplied, on plain records


def _state(where: str, var: str, step: int, call: int, **attrs) -> dict:
    return {"kind": "state", "where": where, "var": var, "step": step, "call": call, "vtype": "Parameter",
            "phase": "train", "attrs": {"dtype": "float32", "requires_grad": True, **attrs}}


def _fp(h: str, amax: float) -> dict:
    return {"h": h, "amax": amax}


def _iteration(step: int, call: int, changed: bool, lr: float, owner: str = "optimizer") -> list[dict]:
    """One iteration of one parameter: a backward leaves a grad, one step (with its lr) runs."""
    after = f"d{step + 1}" if changed else f"d{step}"
    return [
        _state("after:backward", "w", step, call - 1, grad=_fp(f"g{step}", 0.5)),
        _state("before:optimizer.step", "w", step, call, data=_fp(f"d{step}", 1.0), grad=_fp(f"g{step}", 0.5)),
        _state("after:optimizer.step", "w", step, call, data=_fp(after, 1.0), grad=_fp(f"g{step}", 0.5)),
        {"kind": "state", "where": "after:optimizer.step", "var": f"{owner}.param_groups.0", "step": step,
         "call": call, "vtype": "param_group", "owner": owner, "attrs": {"lr": lr}},
    ]


def _applied(records: list[dict]) -> list[tuple[int, bool]]:
    from traincheck_agent.inference.relations import grad_applied
    from traincheck_agent.inference.stream import TraceSource

    collector = grad_applied.Collector(TraceSource("t", "run", 0))
    out = [e for r in records for e in collector.feed(r)] + list(collector.finish())
    return [(e.step, e.applied) for e in out]


def test_data_left_zero_by_a_step_at_a_zero_learning_rate_is_undecided():
    """A warm-up from a learning rate of zero (the HF Trainer's linear schedule) leaves a bias
    initialised to zero at zero after its first step: that says nothing about "the step leaves
    the data non-zero", while the same at a normal rate breaks it."""
    from traincheck_agent.inference.examples import TransitionCollector
    from traincheck_agent.inference.relations import state_transition
    from traincheck_agent.inference.stream import TraceSource

    def first_step(lr: float) -> list:
        zero, grad = {"h": "z", "amax": 0.0, "zero": True}, {"h": "g", "amax": 0.5}
        records = [
            {"kind": "state", "where": "before:optimizer.step", "var": "fc.bias", "step": 0, "call": 2,
             "vtype": "Parameter", "phase": "train", "attrs": {"dtype": "float32", "data": zero, "grad": grad}},
            {"kind": "state", "where": "after:optimizer.step", "var": "fc.bias", "step": 0, "call": 2,
             "vtype": "Parameter", "phase": "train", "attrs": {"dtype": "float32", "data": zero, "grad": grad}},
            {"kind": "state", "where": "after:optimizer.step", "var": "optimizer.param_groups.0", "step": 0,
             "call": 2, "vtype": "param_group", "owner": "optimizer", "attrs": {"lr": lr}},
        ]
        collector = TransitionCollector(TraceSource("t", "run", 0))
        return [e for r in records for e in collector.feed(r)] + collector.finish()

    invariant = Invariant(relation="StateTransition", subject={"event": "optimizer.step", "attribute": "data",
                                                               "effect": "becomes_nonzero"}, precondition=())
    [at_zero] = [e for e in first_step(0.0) if e.attribute == "data"]
    [at_normal] = [e for e in first_step(1e-3) if e.attribute == "data"]
    assert not state_transition.violates(invariant, at_zero)
    assert state_transition.violates(invariant, at_normal)


def test_a_step_whose_learning_rate_is_too_small_to_show_is_undecided():
    """A schedule that ends near zero leaves the data bit-identical: not a grad left unapplied.
    The same unchanged data at a normal learning rate is, from the second step at that rate on
    (the first may have run with the rate recorded before it: a scheduler inside the step)."""
    records = (_iteration(0, 2, True, 0.1) + _iteration(1, 4, False, 1e-9) + _iteration(2, 6, False, 0.1)
               + _iteration(3, 8, False, 0.1))
    assert sorted(_applied(records)) == [(0, True), (1, True), (2, True), (3, False)]


def test_a_last_iteration_that_not_every_optimizer_stepped_gives_no_example():
    """A GAN's generator update after the discriminator's last step ends the run: the
    discriminator's grads of that partial iteration are not judged."""
    full = _iteration(0, 2, True, 0.1, "opt_d") + _iteration(0, 3, True, 0.1, "opt_g")
    partial = _iteration(1, 5, False, 0.1, "opt_g")
    assert _applied(full + partial) == [(0, True)]
    # Both optimizers stepped, neither changed it: judged, and not applied.
    assert _applied(full + _iteration(1, 5, False, 0.1, "opt_d") + _iteration(1, 6, False, 0.1, "opt_g")) == [
        (0, True), (1, False)]


def test_a_grad_zeroed_before_the_step_did_not_arrive_and_one_not_held_there_is_undecided():
    """Clipped to zero between backward and the step: the grad did not arrive, though momentum
    may still move the weights (applied). No grad at the step (a ZeRO partition): unknown."""
    from traincheck_agent.inference.relations import grad_applied
    from traincheck_agent.inference.stream import TraceSource

    def arrived(grad_at_step: dict | None) -> list[bool | None]:
        records = _iteration(0, 2, True, 0.1)
        records[1] = _state("before:optimizer.step", "w", 0, 2, data=_fp("d0", 1.0), grad=grad_at_step)
        collector = grad_applied.Collector(TraceSource("t", "run", 0))
        return [e.arrived for r in records for e in collector.feed(r)] + [e.arrived for e in collector.finish()]

    assert arrived({"h": "g0", "zero": False, "nonfinite": False}) == [True]
    assert arrived({"h": "z", "zero": True, "nonfinite": False}) == [False]
    assert arrived(None) == [None]
    assert arrived({"h": "nostorage:", "zero": False, "nonfinite": False}) == [None]


# ------------------------------------------------------------ preconditions, on plain examples


def test_absent_and_not_separate_examples_that_lack_a_field():
    """DDP examples lack ``partition_dim``; TP shards have it and fail; TP replicas pass."""
    passing = [{"dtype": "float32"}] * 3 + [{"dtype": "float32", "partition_dim": -1}] * 2
    failing = [{"dtype": "float32", "partition_dim": 0}] * 2
    clauses = deduce(passing, failing)
    assert clauses == [Clause("partition_dim", 0, NOT)]
    assert clauses[0].holds({}) and not clauses[0].holds({"partition_dim": 0})
    only_missing = deduce([{"a": 1}] * 3, [{"a": 1, "tmp": True}])
    assert only_missing == [Clause("tmp", None, ABSENT)] and only_missing[0].text() == "tmp is not set"


def test_a_two_clause_disjunction_when_no_conjunction_separates():
    passing = [{"x": 1, "y": "a"}, {"x": 1, "y": "b"}, {"x": 2, "y": "c"}, {"x": 3, "y": "c"}]
    failing = [{"x": 2, "y": "a"}, {"x": 3, "y": "b"}]
    clauses = deduce(passing, failing)
    assert clauses is not None and len(clauses) == 1 and clauses[0].kind == ANY
    assert all(clauses[0].holds(f) for f in passing) and not any(clauses[0].holds(f) for f in failing)
    assert clauses[0].text() == "(x = 1 or y = c)"
    assert Clause.from_json(json.loads(json.dumps(clauses[0].to_json()))) == clauses[0]


def test_merging_references_keeps_what_one_of_them_supports():
    """Reference A supports the hypothesis everywhere; B breaks it in a context A never had
    (dtype) and passes it in one A had too. Pooled, no clause separates; per reference, A's
    examples keep an invariant scoped to A's contexts. A counterexample that A's own context
    cannot tell apart drops it."""
    a = [{"dtype": "float32", "phase": "train"}] * 5
    b_pass = [{"dtype": "float32", "phase": "eval"}] * 2
    b_fail = [{"dtype": "bfloat16", "phase": "train"}, {"dtype": "float32", "phase": "eval"}]
    scopes = deduce_scopes(a + b_pass, b_fail, ["A"] * 5 + ["B"] * 2)
    assert len(scopes) == 1
    assert scopes[0].precondition == [Clause("dtype", "float32"), Clause("phase", "train")]
    assert scopes[0].passing == [0, 1, 2, 3, 4]
    assert deduce_scopes(a, [{"dtype": "float32", "phase": "train"}], ["A"] * 5) == []


def test_domain_lists_what_the_references_showed():
    """A field no reference example had is in the domain as None: an example that has it (a
    shard's ``partition_dim``) is outside."""
    domain = domain_of([{"autocast": None, "phase": "train"}, {"phase": "eval"}], ("autocast", "phase", "dtype"))
    assert domain == {"autocast": [None], "phase": ["eval", "train"], "dtype": [None]}
    sets = tuple((k, frozenset(v)) for k, v in sorted(domain.items()))
    assert outside_domain(sets, {"autocast": None, "phase": "train"}) is None
    assert outside_domain(sets, {"autocast": "cpu:bfloat16", "phase": "train"}) == ("autocast", "cpu:bfloat16")


def test_the_invariants_file_keeps_domains_and_rejects_bad_ones(tmp_path):
    inv = Invariant("StateTransition", {"event": "backward", "attribute": "grad", "effect": "changed"},
                    (Clause("", (Clause("a", 1), Clause("b", None, ABSENT)), ANY),), {"passing": 5}, "d", (),
                    {"dtype": ["float32"], "requires_grad": [True]})
    path = tmp_path / "inv.json"
    write_invariants([inv], path, [])
    [back] = read_invariants(path)
    assert back == inv and back.domain == inv.domain and back.id == inv.id
    doc = json.loads(path.read_text())
    doc["invariants"][0]["domain"] = {"dtype": [["nested"]]}
    path.write_text(json.dumps(doc))
    with pytest.raises(InvariantFileError, match=r"invariants\[0\]\.domain: 'dtype' should be a list of scalar"):
        read_invariants(path)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_an_exact_zero_grad_after_rounding_level_ones_is_undecided():
    """A bias feeding BatchNorm or a softmax has a grad that is zero up to rounding: ~1e-9 at one
    step, exactly 0.0 at the next. Backward did its job; the zero says nothing."""
    from traincheck_agent.inference.examples import TransitionCollector
    from traincheck_agent.inference.relations import state_transition
    from traincheck_agent.inference.stream import TraceSource

    collector = TransitionCollector(TraceSource("t", "run", 0))

    def snapshot(call, step, where, grad, data=None):
        attrs = {"dtype": "float32", "requires_grad": True, "grad": grad}
        if data is not None:
            attrs["data"] = data
        return {"kind": "state", "call": call, "step": step, "where": where, "phase": "train", "var": "b",
                "vtype": "Parameter", "attrs": attrs}

    tiny = {"h": "t", "zero": False, "nonfinite": False, "amax": 3e-9}
    zero = {"h": "z", "zero": True, "nonfinite": False, "amax": 0.0}
    data = {"h": "d", "zero": False, "nonfinite": False, "amax": 0.03}
    examples = []
    for call, step, where, grad, d in ((1, 0, "before:backward", None, None), (1, 0, "after:backward", tiny, None),
                                       (2, 0, "before:optimizer.step", tiny, data),
                                       (3, 1, "before:backward", None, None), (3, 1, "after:backward", zero, None)):
        examples += collector.feed(snapshot(call, step, where, grad, d))
    grads = [e for e in examples if e.event == "backward" and e.attribute == "grad"]
    assert [(e.step, e.after_class, e.rounding_grad) for e in grads] == [(0, "nonzero", False), (1, "zero", True)]
    nonzero = next(e for e in state_transition.EFFECTS if e.name == "becomes_nonzero")
    assert nonzero.undecided(grads[1]) and not nonzero.undecided(grads[0])


def test_an_optimizer_that_may_skip_an_update_is_scoped_apart():
    """Rprop leaves a parameter unchanged when its grad changes sign: pooled with it, the other
    references keep "every grad is applied", scoped to their optimizers, and a parameter no
    optimizer holds in an Adam iteration still violates it."""
    from traincheck_agent.inference.relations import grad_applied

    def example(var, step, trace, applied, steps):
        features = (("dtype", "float32"), ("phase", "train"), ("steps", steps), ("vtype", "Parameter"))
        return grad_applied.AppliedExample(var, step, trace, applied, features)

    adam = [example(f"w{i}", s, "a", True, "torch.optim.Adam.step") for i in range(3) for s in range(3)]
    rprop = [example(f"v{i}", s, "r", i or s % 2, "torch.optim.Rprop.step") for i in range(3) for s in range(3)]
    invariants = grad_applied.infer({grad_applied.KEY: adam + rprop}, ("a", "r"))
    assert [[c.text() for c in i.precondition] for i in invariants] == [["steps = torch.optim.Adam.step"]]
    assert "steps" not in invariants[0].domain
    assert grad_applied.violates(invariants[0], example("head", 0, "b", False, "torch.optim.Adam.step"))


def test_a_wrong_context_ranks_before_what_it_changed():
    """An escaped block: its layers ran with autocast off (one group, whatever their classes),
    and the block returned float32 (a consequence at the same step)."""
    from traincheck_agent.report.triage import triage

    def record(relation, api, variable):
        return {"invariant": f"{relation}-{api}", "relation": relation, "step": 0, "api": api,
                "variable": variable, "message": "m"}

    groups = triage([record("ConsistentOutput", "Block.forward", "model.blocks.1"),
                     record("AutocastRegion", "torch.nn.Linear.forward", "model.blocks.1.fc"),
                     record("AutocastRegion", "torch.nn.LayerNorm.forward", "model.blocks.1.norm")])
    assert [g.relation for g in groups] == ["AutocastRegion", "ConsistentOutput"]
    assert groups[0].variables == ["model.blocks.1.fc", "model.blocks.1.norm"] and groups[0].kind == "context"


TWO_STAGE = str(PIPELINES / "two_stage_train.py")


@pytest.mark.slow
def test_a_new_optimizer_takes_over_the_clock_and_stale_grads_are_not_backwards(tmp_path):
    """A pretext stage, then fine-tuning with a new optimizer in the same variable: the steps
    go on counting, and the pretext head, which keeps its last grad while backward never reaches
    it again, does not cost a pooled file "backward finds the grad cleared" on another pipeline,
    so a dropped zero_grad there is still caught at its first step."""
    runs = _collect_here(tmp_path, {
        "two_stage": [TWO_STAGE], "two_stage2": [TWO_STAGE, "--seed", "1", "--steps", "4"],
        "mlp": [MLP, "--steps", "8"],
        "mlp_bug": [MLP, "--steps", "4", "--seed", "2", "--bug", "no-zero-grad"],
    })
    [trace] = read_traces(runs["two_stage"])
    assert [c["step"] for c in trace.calls("torch.Tensor.backward")] == list(range(8))
    invariants, _ = infer_invariants([runs["two_stage"], runs["two_stage2"], runs["mlp"]])
    cleared = [i for i in invariants if i.relation == "StateTransition" and i.subject["event"] == "backward"
               and i.subject["effect"] == "finds_none_or_zero"]
    assert cleared
    found = [v for v in check_offline(cleared, [runs["mlp_bug"]])]
    assert found and min(v["step"] for v in found) == 1
    assert check_offline(invariants, [runs["two_stage2"]]) == []


def test_zero_grads_that_a_call_leaves_as_they_were_are_no_example_of_it():
    """``zero_grad(set_to_none=False)`` leaves zeros on the grad of a head that this iteration's
    task did not use: backward then leaves that zero as it was (no example of backward, as for
    an unchanged non-zero grad), and ``zero_grad`` finds nothing to change (undecided for
    "changes the grad"). A grad that backward did move is an example, and a zero_grad that
    leaves a non-zero grad as it was is a failure of "changes"."""
    from traincheck_agent.inference.examples import TransitionCollector
    from traincheck_agent.inference.relations import state_transition
    from traincheck_agent.inference.stream import TraceSource

    collector = TransitionCollector(TraceSource("t", "run", 0))
    zero = {"h": "z", "zero": True, "nonfinite": False, "amax": 0.0}
    moved = {"h": "m", "zero": False, "nonfinite": False, "amax": 0.5}
    examples = []
    for call, where, head, trunk in ((1, "before:zero_grad", zero, moved), (1, "after:zero_grad", zero, moved),
                                     (2, "before:backward", zero, zero), (2, "after:backward", zero, moved)):
        for var, grad in (("head.weight", head), ("trunk.weight", trunk)):
            examples += collector.feed({"kind": "state", "call": call, "step": 1, "where": where, "phase": "train",
                                        "var": var, "vtype": "Parameter",
                                        "attrs": {"dtype": "float32", "requires_grad": True, "grad": grad}})
    assert [(e.event, e.var) for e in examples] == [("zero_grad", "head.weight"), ("zero_grad", "trunk.weight"),
                                                    ("backward", "trunk.weight")]
    changes = state_transition.EFFECTS_BY_NAME["changed"]
    head, trunk = examples[:2]
    assert changes.undecided(head) and not changes.undecided(trunk) and not changes.holds(trunk)


def test_a_grad_whose_optimizer_did_not_step_in_the_iteration_is_not_covered():
    """A critic trained twice per generator update gives the generator grads in an iteration
    where only the critic's optimizer steps: the generator's optimizer held it before, so its
    grad was not due to be applied. A parameter that no step ever held is still judged."""
    from traincheck_agent.inference.relations import grad_applied
    from traincheck_agent.inference.stream import TraceSource

    collector = grad_applied.Collector(TraceSource("t", "run", 0))
    grad = {"h": "g", "zero": False, "nonfinite": False, "amax": 0.5}

    def data(h):
        return {"h": h, "zero": False, "nonfinite": False, "amax": 1.0}

    def state(call, step, where, var, attrs):
        return {"kind": "state", "call": call, "step": step, "where": where, "phase": "train", "var": var,
                "vtype": "Parameter", "attrs": {"dtype": "float32", "requires_grad": True, **attrs}}

    records = []
    for step, stepping in ((0, ("critic.w", "gen.w")), (1, ("critic.w",))):
        records += [state(10 * step, step, "after:backward", var, {"grad": grad}) for var in ("critic.w", "gen.w", "stray.w")]
        for n, var in enumerate(stepping):
            call = 10 * step + 1 + n
            records.append(state(call, step, "before:optimizer.step", var, {"grad": grad, "data": data(f"{var}{step}")}))
            records.append(state(call, step, "after:optimizer.step", var, {"grad": grad, "data": data(f"{var}{step}+")}))
    examples = [e for record in records for e in collector.feed(record)] + list(collector.finish())
    found = {(e.step, e.var): (e.applied, e.not_stepped) for e in examples}
    assert found == {(0, "critic.w"): (True, False), (0, "gen.w"): (True, False), (0, "stray.w"): (False, False),
                     (1, "critic.w"): (True, False), (1, "gen.w"): (False, True), (1, "stray.w"): (False, False)}
    applies = Invariant("GradApplied", {"event": "optimizer.step", "attribute": "data", "effect": "applies_every_grad"}, ())
    by_var = {(e.step, e.var): e for e in examples}
    assert grad_applied.outside(applies, by_var[(1, "gen.w")]) == grad_applied.NOT_STEPPED
    assert not grad_applied.violates(applies, by_var[(1, "gen.w")])
    assert grad_applied.outside(applies, by_var[(1, "stray.w")]) is None and grad_applied.violates(applies, by_var[(1, "stray.w")])
