"""Check-mode overhead on the bundled CNN example: plain vs collect vs check, as ratios.

First collects two clean reference runs of the example (other seeds) and infers their
invariants, then runs the example plain, under ``TRAINCHECK_MODE=collect`` and under
``TRAINCHECK_MODE=check`` alternately (so machine noise hits all alike) and reports medians of
process wall time, training-loop time and peak RSS of the training process
(``run_measured`` of ``bench_collect_overhead.py``) and the CPU time the training process used
(steadier than wall time on a shared machine), then, in one more untimed run per mode,
the peak memory of the process tree (the checker process included).
The report starts with the machine: its CPU, cores, and the time of a fixed piece of pure-Python
work of the kind the agent does per record (building small dicts, method calls), at the start and
at the end. The agent's cost is interpreter work while most of a plain step is torch's compiled
kernels, so the ratio grows on a machine whose interpreter is slow for its kernels: compare
figures of two machines with it.
Ratios are medians of per-repeat ratios against the plain run of the same repeat; for wall time
the quartiles of those ratios show the spread. Check variants:
- ``check``: every invariant learned from the references, as a user gets it
  (TRAINCHECK_CHECKER=auto: a checker process where a core is free, else a thread);
- ``check_process`` / ``check_thread``: the same, with the checker forced into a child process
  or a thread of the training process;
- ``check_step_only``: only the StateTransition invariants of ``optimizer.step``, which
  selective instrumentation reduces to two snapshots per step and no call records.
The check runs are clean (the references' script, another seed), so they must report nothing.

    python scripts/bench_check_overhead.py --steps 50 --repeats 5 [--threads 1] [--modes plain,check]

``--modes`` runs only the modes named (plain is always run): with fewer modes per repeat, more
repeats fit in the same time, and the median ratio is the more precise for it.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_collect_overhead import run_measured  # noqa: E402

import traincheck_agent  # noqa: E402
from traincheck_agent.examples import cnn_train  # noqa: E402
from traincheck_agent.inference.engine import infer_invariants  # noqa: E402
from traincheck_agent.inference.invariant import write_invariants  # noqa: E402
from traincheck_agent.report.violations import STATS_EVENTS  # noqa: E402


def collect_reference(out_dir: Path, steps: int, seed: int) -> Path:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCHECK_")}
    env.update(TRAINCHECK_MODE="collect", TRAINCHECK_OUT=str(out_dir))
    cmd = [sys.executable, cnn_train.__file__, "--steps", str(steps), "--seed", str(seed)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"reference run failed: {proc.stderr}")
    return out_dir


def write_invariant_files(tmp: Path, steps: int) -> tuple[Path, Path, int]:
    refs = [collect_reference(tmp / f"ref{seed}", steps, seed) for seed in (1, 2)]
    invariants, files = infer_invariants(refs)
    every = tmp / "inv.json"
    write_invariants(invariants, every, [str(f) for f in files])
    step_only = [i for i in invariants if i.relation == "StateTransition" and i.subject["event"] == "optimizer.step"]
    only = tmp / "inv_step_only.json"
    write_invariants(step_only, only, [str(f) for f in files])
    return every, only, len(invariants)


def python_work_ms(repeats: int = 7) -> float:
    """Median time of a fixed pure-Python workload (100k small dicts built and read)."""
    def work() -> int:
        total = 0
        for i in range(100_000):
            record = {"kind": "state", "step": i, "var": "w"}
            total += record.get("step", 0)
        return total

    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1e3, 1)


def machine() -> dict[str, object]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpu": model or platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "python_work_ms": python_work_ms()}


def compile_agent_bytecode() -> None:
    """Bytecode as an install leaves it (pip compiles on install, but not where the environment
    says PYTHONDONTWRITEBYTECODE): the agent's package and the libraries only it imports, which
    check mode would otherwise compile from source in every run."""
    import orjson
    import psutil
    import wrapt
    import xxhash
    import yaml

    compileall.compile_dir(Path(traincheck_agent.__file__).parent, quiet=1)
    for module in (orjson, psutil, wrapt, xxhash, yaml):
        compileall.compile_dir(Path(module.__file__).parent, quiet=1)


def violations_in(out_dir: Path) -> int:
    """The violations logged under ``out_dir`` (not the coverage and waiver lines that close a
    check's log)."""
    return sum(1 for p in out_dir.glob("violations-*.jsonl") for line in p.read_text().splitlines()
               if line.strip() and json.loads(line).get("event") not in STATS_EVENTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0,
                        help="OMP_NUM_THREADS for every run (0: torch's default); 1 keeps a shared "
                             "machine's load from stalling torch's thread pool")
    parser.add_argument("--modes", default="",
                        help="comma-separated modes to run besides plain (default: all of them)")
    args = parser.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)

    host = machine()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        every, step_only, n_invariants = write_invariant_files(tmp, args.steps)
        modes = {
            "plain": (None, {}),
            "collect": ("collect", {}),
            "check": ("check", {"TRAINCHECK_INV": str(every)}),
            "check_process": ("check", {"TRAINCHECK_INV": str(every), "TRAINCHECK_CHECKER": "process"}),
            "check_thread": ("check", {"TRAINCHECK_INV": str(every), "TRAINCHECK_CHECKER": "thread"}),
            "check_step_only": ("check", {"TRAINCHECK_INV": str(step_only)}),
        }
        if args.modes:
            chosen = {"plain", *args.modes.split(",")}
            unknown = chosen - set(modes)
            if unknown:
                raise SystemExit(f"unknown modes: {', '.join(sorted(unknown))} (known: {', '.join(modes)})")
            modes = {label: spec for label, spec in modes.items() if label in chosen}
        samples: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
        violations: dict[str, int] = {m: 0 for m in modes if m.startswith("check")}
        compile_agent_bytecode()
        # A warm file cache.
        run_measured(None, args.steps, tmp / "warm")
        run_measured("check", args.steps, tmp / "warm_check", {"TRAINCHECK_INV": str(every)})
        for i in range(args.repeats):
            for label, (mode, env) in modes.items():
                out_dir = tmp / f"{label}{i}"
                samples[label].append(run_measured(mode, args.steps, out_dir, env))
                if label in violations:
                    violations[label] += violations_in(out_dir)
        tree = {label: run_measured(mode, args.steps, tmp / f"{label}_memory", env, tree_memory=True)["tree_rss_mb"]
                for label, (mode, env) in modes.items()}

    def median(label: str, key: str) -> float:
        return statistics.median(s[key] for s in samples[label])

    def ratios(label: str, key: str) -> list[float]:
        """Per-repeat ratios: each run against the plain run next to it, which cancels the slow
        drifts of a shared machine that medians of each mode keep."""
        return [s[key] / p[key] for s, p in zip(samples[label], samples["plain"], strict=True)]

    def paired_ratio(label: str, key: str) -> float:
        return statistics.median(ratios(label, key))

    def quartiles(label: str, key: str) -> list[float]:
        """The middle half of the per-repeat ratios: how far one run's ratio strays."""
        values = ratios(label, key)
        if len(values) < 2:
            return [round(values[0], 3)] * 2
        q = statistics.quantiles(values, n=4)
        return [round(q[0], 3), round(q[2], 3)]

    host["python_work_ms_at_end"] = python_work_ms()  # the machine's speed drifts on a shared host
    report: dict[str, object] = {"machine": host, "steps": args.steps, "repeats": args.repeats, "threads": args.threads or "default",
                                 "invariants": n_invariants,
                                 "violations_in_clean_check_runs": violations}
    for key in ("wall_s", "cpu_s", "train_s", "peak_rss_mb"):
        plain = median("plain", key)
        figures: dict[str, object] = {"plain": round(plain, 4)}
        for label in modes:
            if label != "plain":
                figures[label] = round(median(label, key), 4)
                figures[f"{label}_ratio"] = round(paired_ratio(label, key), 3)
                if key == "wall_s":
                    figures[f"{label}_ratio_quartiles"] = quartiles(label, key)
        report[key] = figures
    # One untimed run per mode: the peak summed RSS of the training process and its children.
    report["tree_rss_mb"] = {label: round(mb, 1) for label, mb in tree.items()} | {
        f"{label}_ratio": round(mb / tree["plain"], 3) for label, mb in tree.items() if label != "plain"}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
