"""Memory of a long check-mode run: does the agent's footprint stay flat over 10,000 steps?

Learns invariants from a short clean collect run of the MLP test pipeline, then runs the same
pipeline for ``--steps`` steps plain and under check mode (the checker in a thread and in a
child process), sampling the resident memory of the whole process tree with psutil every
``--interval`` seconds next to the training step the run has printed. Reports, per mode, the RSS
once a fifth of the steps have run, at the last sample, the peak, and the growth between the two
as MiB per 1,000 steps; the check runs are clean, so they must report no violation.

    python scripts/bench_check_memory.py --steps 10000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

import psutil

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "tests" / "pipelines" / "mlp_train.py"
MIB = 2**20


def agent_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCHECK_")}
    env.update(extra)
    return env


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:  # a child that just ended
            continue
    return total


def last_step(out: IO[str]) -> int:
    """The last ``step N`` line the run printed so far (-1: none yet)."""
    out.seek(0)
    lines = [line for line in out.read().splitlines() if line.startswith("step ")]
    return int(lines[-1].split()[1]) if lines else -1


def sample_run(cmd: list[str], env: dict[str, str], interval: float) -> tuple[list[tuple[int, int]], float]:
    """Run ``cmd``; return (training step reached, tree RSS) samples and the wall time."""
    # Output goes to files, not pipes: a pipe nobody reads while sampling would fill and stop
    # the run.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        popen = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
        proc = psutil.Process(popen.pid)
        samples: list[tuple[int, int]] = []
        while popen.poll() is None:
            try:
                rss = tree_rss(proc)
            except psutil.Error:
                break
            samples.append((last_step(out), rss))
            time.sleep(interval)
        wall = time.perf_counter() - started
        if popen.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)} failed:\n{err.read()[-2000:]}")
        return samples, wall


def figures(samples: list[tuple[int, int]], wall: float, warmup: int) -> dict[str, float]:
    """RSS once ``warmup`` steps have run and near the end of the training, the peak, and the
    growth between the two per 1,000 steps."""
    trained = [(step, rss) for step, rss in samples if step >= warmup]
    warm_step, warm = trained[0]
    # The last sample taken before the final step was printed: the run is still training there
    # (later ones may see the exit free memory, or the checker process end).
    end_step, end = [(step, rss) for step, rss in trained if step < trained[-1][0]][-1]
    return {
        "rss_at_warmup_mib": round(warm / MIB, 1),
        "rss_end_mib": round(end / MIB, 1),
        "rss_peak_mib": round(max(rss for _, rss in samples) / MIB, 1),
        "growth_mib_per_1000_steps": round((end - warm) / MIB / max(end_step - warm_step, 1) * 1000, 3),
        "steps_between": end_step - warm_step,
        "wall_s": round(wall, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--interval", type=float, default=0.25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        ref = subprocess.run([sys.executable, str(MLP), "--steps", "10"], capture_output=True, text=True,
                             env=agent_env(TRAINCHECK_MODE="collect", TRAINCHECK_OUT=str(tmp / "ref")))
        if ref.returncode != 0:
            raise SystemExit(ref.stderr)
        inv = subprocess.run([sys.executable, "-m", "traincheck_agent", "infer", str(tmp / "ref"), "-o",
                              str(tmp / "inv.json")], capture_output=True, text=True, env=agent_env())
        if inv.returncode != 0:
            raise SystemExit(inv.stderr)
        cmd = [sys.executable, str(MLP), "--steps", str(args.steps), "--seed", "1", "--print-every", "100"]
        modes = {
            "plain": agent_env(),
            "check_thread": agent_env(TRAINCHECK_MODE="check", TRAINCHECK_INV=str(tmp / "inv.json"),
                                      TRAINCHECK_OUT=str(tmp / "thread"), TRAINCHECK_CHECKER="thread"),
            "check_process": agent_env(TRAINCHECK_MODE="check", TRAINCHECK_INV=str(tmp / "inv.json"),
                                       TRAINCHECK_OUT=str(tmp / "process"), TRAINCHECK_CHECKER="process"),
        }
        report: dict[str, object] = {"steps": args.steps}
        for label, env in modes.items():
            samples, wall = sample_run(cmd, env, args.interval)
            report[label] = figures(samples, wall, args.steps // 5)
        report["violations"] = sum(len(p.read_text().splitlines()) for p in tmp.glob("*/violations-*.jsonl"))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
