"""The generalization bar: the eight mechanisms of the detection bar, implemented a second time
by scripts written independently of this repository's inference code (their own models, loops
and names), plus clean pipelines unlike the bundled ones (``scripts/generalization/cases.py``).

Every bug variant is checked twice: against invariants inferred from its own pipeline's clean
references, and against one file inferred from every reference of the bar pooled, as a team
would share it. Every clean variant (the bug pipelines' correct variants and each clean
pipeline's variant) is checked against its own references and against the pooled file; any
violation there is a false alarm. A mechanism counts as caught when a violation comes within one
iteration of the fault and the top-ranked group points at the cause.

    python scripts/generalization_bar.py [--out DIR] [--reuse] [--json] [--markdown]

About ten minutes on a 2-core machine (some 80 short training runs, a few with 2 ranks).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bar_runs import Run, Verdict, check, collect, points_at

from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import Invariant

HERE = Path(__file__).resolve().parent / "generalization"

# The relations whose invariants sit at each mechanism's cause, each with the words (besides the
# manifest's cause names) that a group of it at the cause names.
CAUSES: dict[str, dict[str, tuple[str, ...]]] = {
    "optimizer-wrong-params": {"GradApplied": ("optimizer.step",), "StateTransition": ("optimizer.step",)},
    "no-zero-grad": {"StateTransition": ("backward", "zero_grad"), "APISequence": ("backward", "zero_grad"),
                     "GradCleared": ("optimizer.step",)},
    "spectral-eval-first": {r: ("spectral", "compute_weight", "power") for r in ("APISequence", "ContextArgument")},
    "ddp-dtype-roundtrip": {"CrossRankConsistent": ()},
    "tp-clip-one-rank": {"CrossRankConsistent": ()},
    "autocast-escape": {"ConsistentOutput": (), "AutocastRegion": ()},
    "double-init": {"DistinctArgument": ()},
    # Dropout left off in training: a dropout call with the wrong flag, or the optimizer steps
    # taken with the model in eval mode.
    "dropout-in-eval": {"ContextArgument": ("dropout",), "APISequence": ("dropout",), "UpdateMode": ("optimizer.step",)},
}
# Mechanisms whose cause is a named module or parameter: the top group must name one of the
# manifest's cause names. For the others the relation and the words above say it (a double
# initialisation happens before the model has names).
NAMED_CAUSES = ("tp-clip-one-rank", "autocast-escape")


def load_cases(path: Path = HERE / "cases.py") -> Any:
    spec = importlib.util.spec_from_file_location("generalization_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.FOLDER = path.resolve().parent
    return module


def _runner(cases: Any):
    def run(entry: dict[str, Any], args: list[str]) -> Run:
        return Run(str(cases.FOLDER / entry["script"]), tuple(args), int(entry.get("ranks", 1)),
                   entry.get("launcher", ""))
    return run


class Bar:
    def __init__(self, root: Path, reuse: bool) -> None:
        self.root, self.reuse = root, reuse
        self.runs = 0

    def traces(self, name: str, run: Run) -> Path:
        self.runs += 1
        return collect(run, self.root / name, self.reuse)


def _caught(mechanism: str, bug: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    causes = CAUSES[mechanism]
    relation = verdict.top.relation if verdict.top is not None else ""
    texts = list(bug.get("cause_names") or []) if mechanism in NAMED_CAUSES else list(causes.get(relation, ()))
    first = verdict.first_step
    within = first is not None and first <= int(bug["fault_step"]) + 1
    at_cause = points_at(verdict.top, causes, texts)
    return {"caught": bool(verdict.violations) and within and at_cause, "violations": len(verdict.violations),
            "first_step": first, "within_one_iteration": within, "top_group_at_cause": at_cause,
            "top_group": verdict.top_text()}


def evaluate(bar: Bar, cases: Any) -> dict[str, Any]:
    _run = _runner(cases)
    own: dict[str, list[Invariant]] = {}
    references: list[Path] = []
    for i, bug in enumerate(cases.BUGS):
        refs = [bar.traces(f"bug{i}/ref{j}", _run(bug, args)) for j, args in enumerate(bug["references"])]
        references += refs
        own[f"bug{i}"] = infer_invariants(refs)[0]
    for i, clean in enumerate(cases.CLEAN):
        ref = bar.traces(f"clean{i}/ref", _run(clean, clean["reference"]))
        references.append(ref)
        own[f"clean{i}"] = infer_invariants([ref])[0]
    started = time.perf_counter()
    pooled, _ = infer_invariants(references)
    pooled_seconds = time.perf_counter() - started

    bugs, clean_rows = [], []
    for i, bug in enumerate(cases.BUGS):
        traces = bar.traces(f"bug{i}/bug", _run(bug, bug["bug"]))
        bugs.append({"mechanism": bug["mechanism"], "script": bug["script"], "fault_step": bug["fault_step"],
                     "own": _caught(bug["mechanism"], bug, check(own[f"bug{i}"], traces)),
                     "pooled": _caught(bug["mechanism"], bug, check(pooled, traces))})
        for j, args in enumerate(bug.get("clean", [])):
            variant = bar.traces(f"bug{i}/clean{j}", _run(bug, args))
            clean_rows.append(_clean_row(f"{bug['mechanism']} variant {j + 1}", bug["script"], own[f"bug{i}"], pooled,
                                         variant))
    for i, clean in enumerate(cases.CLEAN):
        variant = bar.traces(f"clean{i}/variant", _run(clean, clean["variant"]))
        clean_rows.append(_clean_row(clean["name"], clean["script"], own[f"clean{i}"], pooled, variant))
    return {"bugs": bugs, "clean": clean_rows, "pooled_invariants": len(pooled), "references": len(references),
            "pooled_inference_seconds": round(pooled_seconds, 2), "runs": bar.runs}


def _clean_row(name: str, script: str, own: list[Invariant], pooled: list[Invariant], variant: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"name": name, "script": script}
    for label, invariants in (("own", own), ("pooled", pooled)):
        verdict = check(invariants, variant)
        checked, outside = verdict.coverage.totals()
        row[label] = {"violations": len(verdict.violations), "top_group": verdict.top_text(),
                      "checked": checked, "not_covered": outside}
    return row


def summary(results: dict[str, Any]) -> list[str]:
    bugs, clean = results["bugs"], results["clean"]
    lines = []
    for label in ("own", "pooled"):
        caught = sum(b[label]["caught"] for b in bugs)
        noisy = sum(bool(c[label]["violations"]) for c in clean)
        lines.append(f"{label} references: {caught}/{len(bugs)} mechanisms caught within one iteration with the top "
                     f"group at the cause; {noisy} of {len(clean)} clean variants raised a violation")
    return lines


def markdown(results: dict[str, Any]) -> str:
    rows = ["| mechanism | own references | pooled references |", "|---|---|---|"]
    for b in results["bugs"]:
        cells = []
        for label in ("own", "pooled"):
            r = b[label]
            mark = "caught" if r["caught"] else "missed" if not r["violations"] else "flagged, not at the cause" \
                if r["within_one_iteration"] else "late"
            cells.append(f"{mark} (first step {r['first_step']}, fault {b['fault_step']})")
        rows.append(f"| {b['mechanism']} | {cells[0]} | {cells[1]} |")
    rows += ["", "| clean variant | own: violations (not covered) | pooled: violations (not covered) |",
             "|---|---|---|"]
    for c in results["clean"]:
        rows.append(f"| {c['name']} | {c['own']['violations']} ({c['own']['not_covered']}) | "
                    f"{c['pooled']['violations']} ({c['pooled']['not_covered']}) |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="keep the traces here (default: a temporary directory)")
    parser.add_argument("--reuse", action="store_true", help="take traces already under --out as they are")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--markdown", action="store_true", help="print the matrix as a Markdown table")
    parser.add_argument("--cases", type=Path, default=HERE / "cases.py",
                        help="the manifest (scripts are found relative to its folder)")
    args = parser.parse_args()
    cases = load_cases(args.cases)
    with tempfile.TemporaryDirectory() as tmp:
        results = evaluate(Bar(args.out or Path(tmp), args.reuse), cases)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for b in results["bugs"]:
            for label in ("own", "pooled"):
                r = b[label]
                print(f"{'ok ' if r['caught'] else 'NO '}{b['mechanism']} [{label}]: first violation at step "
                      f"{r['first_step']} (fault at {b['fault_step']}), top group -> {r['top_group']}")
        for c in results["clean"]:
            for label in ("own", "pooled"):
                r = c[label]
                if r["violations"]:
                    print(f"ALARM {c['name']} [{label}]: {r['violations']} violations, top -> {r['top_group']}")
    if args.markdown:
        print(markdown(results))
    tail = sys.stderr if args.json else sys.stdout  # --json keeps stdout one JSON document
    for line in summary(results):
        print(line, file=tail)
    print(f"{results['references']} references, {results['pooled_invariants']} pooled invariants "
          f"(inferred in {results['pooled_inference_seconds']} s), {results['runs']} runs", file=tail)
    good = all(b[label]["caught"] for b in results["bugs"] for label in ("own", "pooled")) and not any(
        c[label]["violations"] for c in results["clean"] for label in ("own", "pooled"))
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
