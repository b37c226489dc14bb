"""Build the built-in invariants pack (``traincheck_agent/packs/builtin.json``): the invariants
about library behaviour that hold for any correct training loop, so that a run can be checked
without collecting a reference of it first.

1. Collect a reference of each pipeline of a spread of the bundled clean ones (the generalization
   bar's manifests, the test suite's pipelines, the packaged examples; single-process and 2-rank).
2. Infer one invariants list from all references together.
3. Keep the library-level invariants only (``inference/library_level.py``: a general rule over
   each invariant's relation, subject, precondition and domain).
4. Check every clean run of the manifests (their clean variants), and those of the manifests
   given by ``--verify-cases`` (pipelines it does not learn from), and drop any invariant that
   any of them violates; then check them all again and fail unless every one passes.
5. Write the pack with a header: pack version, the torch it was built with, the pipelines.

    python scripts/build_builtin_pack.py [--work DIR] [--reuse] [--collect-only] [--cases F]... [--verify-cases F]... [-o PATH]

``--work`` keeps the traces (one folder per run, named after the pipeline and its arguments),
and ``--reuse`` takes those already there, so an interrupted build resumes where it stopped.
About 160 runs, over an hour on a busy 2-core machine from nothing; a minute or two with every
trace kept.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bar_runs import Run, check, collect
from generalization_bar import load_cases

import traincheck_agent
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.library_level import library_level, narrowed
from traincheck_agent.inference.pack import PACK_VERSION, write_pack

SCRIPTS = Path(__file__).resolve().parent
ROOT = SCRIPTS.parent
GENERALIZATION = SCRIPTS / "generalization"
DEFAULT_OUTPUT = ROOT / "traincheck_agent" / "packs" / "builtin.json"
# The manifests whose pipelines the pack learns from (the first bar: single-process, DDP, DeepSpeed,
# Accelerate and tensor-parallel pipelines).
DEFAULT_CASES = (GENERALIZATION / "cases.py",)
# Manifests whose clean runs only check the pack (pipelines it does not learn from: a GAN, weight
# norm, manual tensor parallelism, L-BFGS with a closure, sparse embeddings, ...); the other
# held-out bars stay unseen.
DEFAULT_VERIFY = tuple(GENERALIZATION / name / "cases.py" for name in ("heldout2", "heldout4", "heldout5", "heldout7"))


@dataclass
class Pipeline:
    """One bundled pipeline: the run whose trace is a reference (None: only its clean variants
    are checked), and its clean variants."""

    name: str
    reference: Run | None
    clean: list[Run] = field(default_factory=list)


def _extra_pipelines() -> list[Pipeline]:
    """The test suite's pipelines and the packaged examples that are not in any manifest."""
    tests, examples = ROOT / "tests" / "pipelines", ROOT / "traincheck_agent" / "examples"

    def run(script: Path, *args: str, ranks: int = 1) -> Run:
        return Run(str(script), args, ranks, "torchrun" if ranks > 1 else "python")

    return [
        Pipeline("mlp-train", run(tests / "mlp_train.py", "--steps", "6", "--seed", "0"),
                 [run(tests / "mlp_train.py", "--steps", "5", "--seed", "3", "--optimizer", "sgd"),
                  run(tests / "mlp_train.py", "--steps", "5", "--seed", "4", "--accumulate", "2", "--clip", "1.0")]),
        Pipeline("ddp-train", run(tests / "ddp_train.py", "--steps", "4", "--seed", "0", ranks=2),
                 [run(tests / "ddp_train.py", "--steps", "4", "--seed", "3", "--accumulate", "2", ranks=2)]),
        Pipeline("example-cnn", run(examples / "cnn_train.py", "--steps", "8", "--seed", "0", "--eval-every", "4"),
                 [run(examples / "cnn_train.py", "--steps", "6", "--seed", "3", "--optimizer", "sgd",
                      "--autocast", "bf16")]),
        Pipeline("example-transformer", run(examples / "transformer_lm.py", "--steps", "6", "--seed", "0"),
                 [run(examples / "transformer_lm.py", "--steps", "5", "--seed", "3", "--autocast", "bf16")]),
    ]


def _manifest_pipelines(path: Path, learn: bool = True) -> list[Pipeline]:
    cases = load_cases(path)
    prefix = path.parent.name if path.parent != GENERALIZATION else "bar"

    def run(entry: dict[str, Any], args: list[str]) -> Run:
        return Run(str(cases.FOLDER / entry["script"]), tuple(args), int(entry.get("ranks", 1)),
                   entry.get("launcher", ""))

    out = [Pipeline(f"{prefix}/{Path(bug['script']).stem}", run(bug, bug["references"][0]) if learn else None,
                    [run(bug, args) for args in bug.get("clean", [])]) for bug in cases.BUGS]
    out += [Pipeline(f"{prefix}/{Path(c['script']).stem}", run(c, c["reference"]) if learn else None,
                     [run(c, c["variant"])])
            for c in cases.CLEAN]
    return out


def pipelines(cases_files: list[Path], verify_files: list[Path]) -> list[Pipeline]:
    found = [p for path in cases_files for p in _manifest_pipelines(path)]
    checked_only = [p for path in verify_files for p in _manifest_pipelines(path, learn=False)]
    return found + _extra_pipelines() + checked_only


def _folder(work: Path, pipeline: Pipeline, run: Run) -> Path:
    """One folder per run, named after its pipeline and a hash of its arguments and ranks, so
    that ``--reuse`` never takes another run's traces."""
    digest = hashlib.sha256(json.dumps([run.script, run.args, run.ranks]).encode()).hexdigest()[:10]
    return work / pipeline.name.replace("/", "__") / digest


def _collect_once(run: Run, folder: Path, reuse: bool) -> Path:
    """The traces of ``run`` in ``folder``: collected into a side folder and renamed when the run
    succeeded, so that an interrupted build never leaves half a trace for ``--reuse`` to take."""
    if reuse and folder.is_dir():
        return folder
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    collect(run, partial)
    partial.rename(folder)
    return folder


def _collect_all(found: list[Pipeline], work: Path, reuse: bool) -> dict[str, tuple[Path | None, list[Path]]]:
    traces: dict[str, tuple[Path | None, list[Path]]] = {}
    runs = [(p, r) for p in found for r in (p.reference, *p.clean) if r is not None]
    for i, (pipeline, run) in enumerate(runs, 1):
        started = time.perf_counter()
        folder = _collect_once(run, _folder(work, pipeline, run), reuse)
        print(f"[{i}/{len(runs)}] {pipeline.name}: {run.label()} ({time.perf_counter() - started:.0f} s)",
              file=sys.stderr, flush=True)
        ref, cleans = traces.get(pipeline.name, (folder if run is pipeline.reference else None, []))
        traces[pipeline.name] = (ref, cleans if run is pipeline.reference else [*cleans, folder])
    return traces


def _named_sources(invariant: Invariant, pipeline_of: dict[str, str]) -> Invariant:
    """``invariant`` with its sources named by pipeline (``pipeline_of``: by trace file name)."""
    return dataclasses.replace(invariant, sources=tuple(sorted({pipeline_of.get(s, s) for s in invariant.sources})))


def _violated_ids(invariants: list[Invariant], clean_runs: list[Path]) -> dict[str, set[str]]:
    """For each clean run that raises violations, the ids of the invariants it violates."""
    out = {}
    for folder in clean_runs:
        ids = {v["invariant"] for v in check(invariants, folder).violations}
        if ids:
            out[str(folder)] = ids
    return out


def build(cases_files: list[Path], verify_files: list[Path], work: Path, reuse: bool, output: Path,
          collect_only: bool) -> int:
    import torch

    found = pipelines(cases_files, verify_files)
    traces = _collect_all(found, work, reuse)
    if collect_only:
        return 0
    references = [ref for ref, _ in traces.values() if ref is not None]
    clean_runs = [c for _, cleans in traces.values() for c in cleans]
    inferred, _ = infer_invariants(references)
    pipeline_of = {f.name: name for name, (ref, _) in traces.items() if ref is not None
                   for f in ref.glob("trace_*.jsonl")}
    kept = [_named_sources(n, pipeline_of) for inv in inferred
            if (n := narrowed(inv)) is not None and library_level(n)]
    print(f"{len(inferred)} invariants inferred from {len(references)} references; {len(kept)} library-level",
          file=sys.stderr)
    violated = _violated_ids(kept, clean_runs)
    dropped = set().union(*violated.values()) if violated else set()
    for folder, ids in sorted(violated.items()):
        print(f"  clean run {Path(folder).relative_to(work)} violates {len(ids)}: dropped {', '.join(sorted(ids))}",
              file=sys.stderr)
    pack = [inv for inv in kept if inv.id not in dropped]
    still = _violated_ids(pack, clean_runs)
    if still:
        print(f"error: {len(still)} clean runs still raise violations: {sorted(still)}", file=sys.stderr)
        return 1
    write_pack(pack, output, torch_version=torch.__version__, agent_version=traincheck_agent.__version__,
               pipelines=sorted(n for n, (ref, _) in traces.items() if ref is not None),
               checked_on=sorted(n for n, (_, cleans) in traces.items() if cleans))
    print(f"wrote {output}: {len(pack)} invariants ({len(dropped)} dropped for clean runs), "
          f"{len(clean_runs)} clean runs pass, pack version {PACK_VERSION}, torch {torch.__version__}, "
          f"{output.stat().st_size // 1024} KiB", file=sys.stderr)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="keep the traces here (default: a temporary directory)")
    parser.add_argument("--reuse", action="store_true", help="take traces already under --work as they are")
    parser.add_argument("--collect-only", action="store_true", help="collect the traces and stop")
    parser.add_argument("--cases", type=Path, action="append",
                        help="a generalization manifest to learn from (repeatable; default: "
                             + ", ".join(str(p.relative_to(ROOT)) for p in DEFAULT_CASES) + ")")
    parser.add_argument("--verify-cases", type=Path, action="append",
                        help="a manifest whose clean runs only check the pack (repeatable; default: "
                             + ", ".join(str(p.relative_to(ROOT)) for p in DEFAULT_VERIFY) + ")")
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT, help="where to write the pack")
    args = parser.parse_args()
    cases_files = args.cases or list(DEFAULT_CASES)
    verify_files = args.verify_cases or list(DEFAULT_VERIFY)
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
        return build(cases_files, verify_files, args.work.resolve(), args.reuse, args.output, args.collect_only)
    with tempfile.TemporaryDirectory() as tmp:
        return build(cases_files, verify_files, Path(tmp), args.reuse, args.output, args.collect_only)


if __name__ == "__main__":
    sys.exit(main())
