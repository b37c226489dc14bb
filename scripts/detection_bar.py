"""The detection bar: eight silent training bugs, each checked against invariants inferred from
clean references of its pipeline. For each: was it caught, how many steps after the fault, does
the top-ranked violation group point at the cause, and do correct variants of the pipeline
(other seeds, learning rates, batch sizes, optimizers, lengths, gradient accumulation, grad
clipping, frozen-backbone fine-tuning, DDP with no_sync) stay free of violations.

Runs real CPU training (torchrun with gloo for the 2-rank cases), collects traces, infers,
checks offline, triages. About two minutes on a 2-core machine.

    python scripts/detection_bar.py [--out DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bar_runs import Run, check, collect, points_at

from traincheck_agent.examples import cnn_train, transformer_lm
from traincheck_agent.inference.engine import infer_invariants

PIPELINES = Path(__file__).resolve().parent.parent / "tests" / "pipelines"
MLP, SPECTRAL, DDP, TP = (str(PIPELINES / n) for n in ("mlp_train.py", "spectral_train.py", "ddp_train.py",
                                                        "tp_train.py"))
CNN, LM = cnn_train.__file__, transformer_lm.__file__


@dataclass(frozen=True)
class Case:
    name: str
    references: tuple[Run, ...]
    bug: Run
    fault_step: int  # the first step whose state or calls the fault affects
    cause: tuple[tuple[str, ...], str]  # (relations, text the top group's subject or pattern must contain)
    clean: tuple[Run, ...] = ()  # correct variants of the pipeline: they must raise nothing


CASES = (
    Case("optimizer over frozen parameters: step updates nothing",
         (Run(MLP, ("--steps", "8")), Run(MLP, ("--steps", "6", "--seed", "2", "--freeze-backbone"))),
         Run(MLP, ("--steps", "4", "--bug", "optimizer-over-frozen")), 0, (("GradApplied", "StateTransition"), "optimizer.step"),
         (Run(MLP, ("--steps", "5", "--optimizer", "sgd", "--seed", "3", "--lr", "0.005")),
          Run(MLP, ("--steps", "4", "--accumulate", "4", "--seed", "4")),
          Run(MLP, ("--steps", "5", "--freeze-backbone", "--seed", "5")),
          Run(MLP, ("--steps", "5", "--clip", "0.5", "--seed", "6")))),
    Case("zero_grad forgotten: gradients accumulate",
         (Run(CNN, ("--steps", "10", "--optimizer", "adadelta")),),
         Run(CNN, ("--steps", "4", "--optimizer", "adadelta", "--bug", "no-zero-grad")), 1,
         (("StateTransition",), "backward"),
         (Run(CNN, ("--steps", "6", "--optimizer", "adadelta", "--seed", "3", "--batch-size", "16")),)),
    Case("eval forward before any training forward with spectral norm",
         (Run(SPECTRAL, ("--seed", "0")), Run(SPECTRAL, ("--seed", "1", "--eval-every", "2"))),
         Run(SPECTRAL, ("--bug", "eval-before-train", "--seed", "4")), -1, (("APISequence",), "compute_weight"),
         (Run(SPECTRAL, ("--seed", "5", "--steps", "5", "--eval-every", "1")),)),
    Case("DDP replicas drift after a dtype round trip of the wrapped model",
         (Run(DDP, ("--steps", "6"), 2),), Run(DDP, ("--steps", "4", "--bug", "dtype-roundtrip"), 2), 0,
         (("CrossRankConsistent",), ""),
         (Run(DDP, ("--steps", "4", "--accumulate", "2", "--seed", "3"), 2), Run(DDP, ("--steps", "8", "--seed", "1"), 2))),
    Case("tensor parallelism: replicated grads clipped on one rank (BLOOM-176B)",
         (Run(TP, (), 2),), Run(TP, ("--bug", "clip-on-one-rank"), 2), 0, (("CrossRankConsistent",), "model.0"),
         (Run(TP, ("--steps", "4"), 2),)),
    Case("a layer escapes autocast: float32 inside the bf16 region",
         (Run(LM, ("--steps", "4", "--autocast", "bf16")), Run(LM, ("--steps", "4"))),
         Run(LM, ("--steps", "2", "--autocast", "bf16", "--bug", "escape-autocast")), 0,
         (("ConsistentOutput",), "Sequential"),
         (Run(LM, ("--steps", "3", "--autocast", "bf16", "--seed", "4", "--batch-size", "4")),)),
    Case("the same tensor initialised twice with normal_",
         (Run(MLP, ("--steps", "3", "--init", "normal")), Run(MLP, ("--steps", "3", "--init", "normal", "--seed", "4"))),
         Run(MLP, ("--steps", "2", "--bug", "double-init")), -1, (("DistinctArgument",), "normal_"),
         (Run(MLP, ("--steps", "2", "--init", "normal", "--seed", "9")),)),
    Case("dropout still active in eval mode",
         (Run(CNN, ("--steps", "12", "--eval-every", "4", "--optimizer", "adadelta")),
          Run(CNN, ("--steps", "12", "--eval-every", "3", "--seed", "2", "--optimizer", "adadelta"))),
         Run(CNN, ("--steps", "8", "--eval-every", "4", "--optimizer", "adadelta", "--bug", "dropout-in-eval")), 4,
         (("ContextArgument",), "dropout"),
         (Run(CNN, ("--steps", "6", "--eval-every", "2", "--seed", "7", "--batch-size", "16", "--optimizer",
                    "adadelta")),)),
)


def evaluate(case: Case, root: Path) -> dict:
    refs = [collect(run, root / f"ref{i}") for i, run in enumerate(case.references)]
    invariants, _ = infer_invariants(refs)
    verdict = check(invariants, collect(case.bug, root / "bug"))
    top, first = verdict.top, verdict.first_step
    relations, text = case.cause
    points_at_cause = points_at(top, relations, [text])
    false_alarms = {" ".join(run.args): len(check(invariants, collect(run, root / f"clean{i}")).violations)
                    for i, run in enumerate(case.clean)}
    return {
        "bug": case.name,
        "invariants": len(invariants),
        "caught": bool(verdict.violations),
        "violations": len(verdict.violations),
        "fault_step": case.fault_step,
        "first_violation_step": first,
        "within_one_iteration": first is not None and first <= case.fault_step + 1,
        "top_group": verdict.top_text(),
        "top_group_points_at_cause": points_at_cause,
        "clean_variants": len(false_alarms),
        "false_alarms": {args: n for args, n in false_alarms.items() if n},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="keep the traces here (default: a temporary directory)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        results = [evaluate(case, root / f"case{i}") for i, case in enumerate(CASES, start=1)]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for i, r in enumerate(results, start=1):
            mark = "ok " if r["caught"] and r["within_one_iteration"] and r["top_group_points_at_cause"] else "NO "
            print(f"{mark}{i}. {r['bug']}: first violation at step {r['first_violation_step']} "
                  f"(fault at {r['fault_step']}), top group -> {r['top_group']}; "
                  f"{r['clean_variants']} clean variants, false alarms: {r['false_alarms'] or 'none'}")
    caught = sum(r["caught"] and r["within_one_iteration"] and r["top_group_points_at_cause"] for r in results)
    variants = sum(r["clean_variants"] for r in results)
    noisy = sum(len(r["false_alarms"]) for r in results)
    print(f"{caught}/{len(results)} caught within one iteration with the top group at the cause; "
          f"{noisy} of {variants} clean variants raised a violation")
    good = caught == len(results) and noisy == 0
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
