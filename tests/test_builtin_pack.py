"""The built-in invariants pack: it holds library-level invariants only (the rule is asserted on
every one of them), it is what check mode uses with ``TRAINCHECK_INV=builtin`` or with no
``TRAINCHECK_INV`` at all, clean runs of pipelines give it nothing to report, and it catches the
bugs its invariants cover. The runs are real: the test suite's MLP in this process, the
generalization bar's pipelines (single-process and 2-rank) in child processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MLP, agent_env, run_script

from traincheck_agent.agent.checking.check_mode import load_invariant_files
from traincheck_agent.cli import main
from traincheck_agent.inference import pack
from traincheck_agent.inference.invariant import Invariant, read_invariants
from traincheck_agent.inference.library_level import library_level, narrowed, problem
from traincheck_agent.inference.preconditions import Clause

ROOT = Path(__file__).resolve().parents[1]
CNN = ROOT / "traincheck_agent" / "examples" / "cnn_train.py"
BAR = ROOT / "scripts" / "generalization"


def _violations(out: Path) -> list[dict]:
    found = []
    for path in sorted(out.glob("violations-*.jsonl")):
        found += [r for r in map(json.loads, path.read_text().splitlines()) if r.get("event") != "coverage"]
    return found


# ------------------------------------------------------------------ the pack itself


def test_the_pack_holds_library_level_invariants_only():
    path = pack.builtin_pack_path()
    invariants = read_invariants(path)
    assert len(invariants) >= 20
    assert [(inv.id, problem(inv)) for inv in invariants if problem(inv)] == []
    header = pack.pack_header(path)
    assert header["name"] == "builtin" and header["version"] == pack.PACK_VERSION
    assert header["torch"].count(".") >= 1 and len(header["pipelines"]) >= 10
    assert len(header["checked_on"]) > len(header["pipelines"])  # clean runs of pipelines it never learned from
    relations = {inv.relation for inv in invariants}
    assert {"StateTransition", "ConsistentOutput", "CrossRankConsistent", "ContextArgument"} <= relations
    assert not relations & {"APISequence", "Threshold", "VarPeriodicChange"}
    assert path.stat().st_size < 400_000  # package data: keep it small


def _inv(relation: str, subject: dict, precondition: tuple[Clause, ...] = (), **domain: list) -> Invariant:
    return Invariant(relation, subject, precondition, domain=domain)


def test_invariants_show_lists_the_pack(capsys):
    assert main(["invariants", "show", "builtin", "--relation", "CrossRankConsistent"]) == 0
    lines = capsys.readouterr().out.splitlines()
    wanted = [i for i in read_invariants(pack.builtin_pack_path()) if i.relation == "CrossRankConsistent"]
    assert wanted and lines[-1] == f"{len(wanted)} of {len(read_invariants(pack.builtin_pack_path()))} invariants"
    assert all(line.split()[1] == "CrossRankConsistent" for line in lines[:-1])


def test_the_rule_keeps_library_facts():
    zero_grad = _inv("StateTransition", {"event": "zero_grad", "attribute": "grad", "effect": "becomes_zero"},
                     (Clause("first_in_step", True),), dtype=["float32"])
    dtype = _inv("ConsistentOutput", {"api": "torch.nn.Linear.forward", "property": "dtype", "value": "bfloat16"},
                 (Clause("autocast", "cpu:bfloat16"),), **{"self.type": ["Linear"]})
    replicas = _inv("CrossRankConsistent", {"event": "after:optimizer.step", "attribute": "data"})
    dropout = _inv("ContextArgument", {"api": "torch.nn.functional.dropout", "argument": "training", "value": False},
                   (Clause("module_training", False),))
    assert [problem(i) for i in (zero_grad, dtype, replicas, dropout)] == ["", "", "", ""]


@pytest.mark.parametrize(("invariant", "why"), [
    (_inv("ConsistentOutput", {"api": "__main__.Net.forward", "property": "dtype", "value": "float32"}),
     "not in a library namespace"),
    (_inv("EventContain", {"api": "torch.nn.Linear.forward", "child": "mylib.ops.fused"}), "not in a library namespace"),
    (_inv("CrossRankConsistent", {"event": "after:optimizer.step", "attribute": "data",
                                  "variables": ["model.fc.weight"]}), "names the program's own objects"),
    (_inv("AutocastRegion", {"api": "torch.nn.Linear.forward", "module": "model.head", "autocast": "off"}),
     "names the program's own objects"),
    (_inv("UpdateMode", {"event": "optimizer.step", "model": "net", "phase": "train"}),
     "names the program's own objects"),
    (_inv("VarPeriodicChange", {"event": "after:optimizer.step", "vtype": "param_group", "variable": "opt.0",
                                "attribute": "lr", "period": 2, "offset": 0}), "facts of one script"),
    (_inv("APISequence", {"form": "covers", "api": "torch.nn.functional.mse_loss",
                          "between": "torch.optim.SGD.step"}), "facts of one script"),
    (_inv("ConsistentOutput", {"api": "torch.nn.Sequential.forward", "property": "dtype", "value": "float32"}),
     "runs the user's code"),
    (_inv("ContextArgument", {"api": "torch.nn.TransformerEncoderLayer.forward", "argument": "is_causal",
                              "value": True}), "what the script passes"),
    (_inv("ConsistentOutput", {"api": "torch.nn.Linear.forward", "property": "dtype", "value": "float32"},
          **{"self.type": ["Linear", "LoRALinearOfMine"]}), "not a library class"),
    (_inv("ConsistentOutput", {"api": "torch.nn.Linear.forward", "property": "dtype", "value": "float32"},
          (Clause("self.type", "LoRALinearOfMine"),)), "not a library class"),
])
def test_the_rule_rejects_facts_of_one_script(invariant, why):
    assert why in problem(invariant)
    assert not library_level(invariant)


def test_narrowing_takes_the_scripts_classes_out_of_the_domain():
    mixed = _inv("ConsistentOutput", {"api": "torch.nn.Linear.forward", "property": "dtype", "value": "float32"},
                 **{"self.type": ["Linear", "LoRALinearOfMine"], "phase": ["train"]})
    kept = narrowed(mixed)
    assert kept is not None and kept.domain == {"self.type": ["Linear"], "phase": ["train"]} and library_level(kept)
    only_mine = _inv("ConsistentOutput", {"api": "torch.nn.Linear.forward", "property": "dtype", "value": "float32"},
                     **{"self.type": ["LoRALinearOfMine"]})
    assert narrowed(only_mine) is None


def test_a_pack_built_for_another_torch_says_so_once_and_is_still_used(tmp_path, monkeypatch, capsys):
    assert pack.torch_mismatch({"torch": "2.5.1+cpu"}, running="2.5.0") == ""
    line = pack.torch_mismatch({"name": "builtin", "torch": "1.13.1"}, running="2.5.1")
    assert line.startswith("the builtin invariants pack was built with torch 1.13.1, this is torch 2.5.1")
    doc = json.loads(pack.builtin_pack_path().read_text())
    doc["pack"]["torch"] = "1.13.1"
    (tmp_path / "builtin.json").write_text(json.dumps(doc))
    monkeypatch.setattr(pack, "PACKS_DIR", tmp_path)
    invariants, usable = load_invariant_files([Path("builtin")])
    assert usable == 1 and len(invariants) == len(doc["invariants"])
    err = capsys.readouterr().err.splitlines()
    assert [e for e in err if "built with torch" in e] == [f"[traincheck] {pack.torch_mismatch(doc['pack'])}"]


# ------------------------------------------------------------------ check mode, in this process


def _dropout_ignoring_eval(out: Path) -> list[dict]:
    """The dropout calls of the example CNN's evaluation passes (every other step, and after the
    last) that drop anyway: its functional dropout ignores the module's mode."""
    return [v for v in _violations(out) if v["relation"] == "ContextArgument" and "dropout" in v["api"]]


def test_check_mode_without_traincheck_inv_uses_the_pack_and_says_so(agent_in_process, tmp_path, capsys):
    out = tmp_path / "check"
    agent = agent_in_process("check", out_dir=out)
    assert agent.writer is not None  # the pack was usable
    run_script(CNN, "--steps", "5", "--eval-every", "2", "--bug", "dropout-in-eval")
    agent.stop()
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "without TRAINCHECK_INV" in line]
    assert said == ["[traincheck] check mode without TRAINCHECK_INV: checking the built-in invariants pack "
                    "(TRAINCHECK_INV=builtin; learn your own with traincheck infer)"]
    assert sorted({v["step"] for v in _dropout_ignoring_eval(out)}) == [2, 4, 5]


def test_traincheck_inv_builtin_reports_nothing_on_a_clean_run(agent_in_process, tmp_path, capsys):
    out = tmp_path / "check"
    agent = agent_in_process("check", out_dir=out, TRAINCHECK_INV="builtin")
    run_script(MLP, "--steps", "5", "--optimizer", "sgd", "--seed", "3", "--lr", "0.005")
    agent.stop()
    err = capsys.readouterr().err
    assert _violations(out) == []
    assert "without TRAINCHECK_INV" not in err
    assert "[traincheck] check summary (rank 0): no violations" in err


def test_builtin_combines_with_a_file(agent_in_process, tmp_path):
    own = tmp_path / "own.json"
    doc = json.loads(pack.builtin_pack_path().read_text())
    own.write_text(json.dumps(doc | {"invariants": doc["invariants"][:1]}))
    invariants, usable = load_invariant_files([Path("builtin"), own])
    assert usable == 2 and len(invariants) == len(doc["invariants"])  # one invariant in both is checked once


# ------------------------------------------------------------------ offline


def test_traincheck_check_takes_builtin(agent_in_process, tmp_path, capsys):
    out = tmp_path / "bug"
    agent = agent_in_process("collect", out_dir=out)
    run_script(CNN, "--steps", "3", "--eval-every", "2", "--bug", "dropout-in-eval")
    agent.stop()
    capsys.readouterr()
    assert main(["check", str(out), "-i", "builtin", "--out", str(tmp_path / "checked")]) == 1
    assert "ContextArgument torch.nn.functional.dropout" in capsys.readouterr().out
    assert _dropout_ignoring_eval(tmp_path / "checked")
    # A path is a file, never the pack: one that is not there is bad input.
    assert main(["check", str(out), "-i", str(tmp_path / "builtin"), "--out", str(tmp_path / "again")]) == 2
    assert "builtin" in capsys.readouterr().err


# ------------------------------------------------------------------ pipelines of the generalization bar


def _bar_run(script: str, args: list[str], ranks: int, launcher: str, out: Path) -> subprocess.CompletedProcess:
    env = agent_env("check", out, TRAINCHECK_INV="builtin", OMP_NUM_THREADS="1")
    if ranks > 1 and launcher == "torchrun":
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}", "--standalone",
                   script, *args]
    else:
        command = [sys.executable, script, *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


# A representative subset of the clean runs the pack was checked against when it was built
# (the build asserts all of them): single-process, autocast, DDP under torchrun.
CLEAN = [
    ("pipelines/small_cnn_classifier.py", ["--steps", "6", "--seed", "3", "--lr", "0.004"], 1, "python"),
    ("pipelines/mixer_bf16_autocast.py", ["--steps", "6", "--seed", "3", "--lr", "0.001"], 1, "python"),
    ("pipelines/ddp_conv1d_classifier.py", ["--steps", "6", "--seed", "5", "--batch-size", "24"], 2, "torchrun"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("script", "args", "ranks", "launcher"), CLEAN, ids=[Path(c[0]).stem for c in CLEAN])
def test_clean_pipelines_raise_nothing_with_the_pack(script, args, ranks, launcher, tmp_path):
    proc = _bar_run(str(BAR / script), args, ranks, launcher, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _violations(tmp_path) == []
    assert "[traincheck] violation" not in proc.stderr


# Bugs of the generalization bar that the pack's invariants cover (its own bug variants, checked
# online): a dropout left active in evaluation, a double initialisation, one tensor-parallel rank
# clipping its grads alone (the replicated parameters drift apart), a zero_grad moved into a
# periodic logging block (it still runs at step 1, so step 2 is the first to apply stale grads).
BUGS = [
    ("pipelines/small_cnn_classifier.py", ["--steps", "6", "--seed", "2", "--bug", "no-zero-grad"], 1, "python",
     "GradCleared", 2),
    ("pipelines/textcnn_classifier.py", ["--steps", "6", "--seed", "2", "--bug", "dropout-in-eval"], 1, "python",
     "ContextArgument", 2),
    ("pipelines/resmlp_custom_init.py", ["--steps", "6", "--seed", "2", "--bug", "double-init"], 1, "python",
     "DistinctArgument", -1),
    ("pipelines/tp_mlp_lm.py", ["--steps", "6", "--seed", "2", "--bug", "tp-clip-one-rank"], 2, "torchrun",
     "CrossRankConsistent", 1),
]


@pytest.mark.slow
@pytest.mark.parametrize(("script", "args", "ranks", "launcher", "relation", "by_step"), BUGS,
                         ids=[b[1][-1] for b in BUGS])
def test_the_pack_catches_the_bugs_it_covers(script, args, ranks, launcher, relation, by_step, tmp_path):
    proc = _bar_run(str(BAR / script), args, ranks, launcher, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = [v for v in _violations(tmp_path) if v["relation"] == relation]
    assert found and min(v["step"] for v in found) <= by_step
