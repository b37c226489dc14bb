"""Memory of a long check-mode run: does the agent's footprint stay flat over 10,000 steps?

Learns invariants from a short clean collect run of the MLP test pipeline, then runs the same
pipeline for ``--steps`` steps plain and under check mode (the checker in a thread and in a
child process), sampling the resident memory of the whole process tree with psutil every
``--interval`` seconds. Reports, per mode, the RSS after warm-up (at 20% of the run), at the end,
the peak, and the growth between the two as MiB per 1,000 steps; the check runs are clean, so
they must report no violation.

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


def sample_run(cmd: list[str], env: dict[str, str], interval: float) -> tuple[list[tuple[float, int]], float, str]:
    """Run ``cmd``; return (elapsed s, tree RSS) samples, the wall time, and its stdout."""
    started = time.perf_counter()
    popen = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc = psutil.Process(popen.pid)
    samples: list[tuple[float, int]] = []
    while popen.poll() is None:
        try:
            samples.append((time.perf_counter() - started, tree_rss(proc)))
        except psutil.Error:
            break
        time.sleep(interval)
    out, err = popen.communicate()
    if popen.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-2000:]}")
    return samples, time.perf_counter() - started, out


def figures(samples: list[tuple[float, int]], wall: float, steps: int) -> dict[str, float]:
    """RSS after warm-up (20% of the run) and at the end, the peak, and the growth between them
    per 1,000 steps (time stands in for steps: the loop runs at a steady pace)."""
    warm_t = 0.2 * wall
    warm = next((rss for t, rss in samples if t >= warm_t), samples[-1][1])
    end = samples[-1][1]
    span_steps = steps * (samples[-1][0] - warm_t) / wall
    return {
        "rss_after_warmup_mib": round(warm / MIB, 1),
        "rss_end_mib": round(end / MIB, 1),
        "rss_peak_mib": round(max(rss for _, rss in samples) / MIB, 1),
        "growth_mib_per_1000_steps": round((end - warm) / MIB / max(span_steps, 1) * 1000, 3),
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
        cmd = [sys.executable, str(MLP), "--steps", str(args.steps), "--seed", "1"]
        modes = {
            "plain": agent_env(),
            "check_thread": agent_env(TRAINCHECK_MODE="check", TRAINCHECK_INV=str(tmp / "inv.json"),
                                      TRAINCHECK_OUT=str(tmp / "thread"), TRAINCHECK_CHECKER="thread"),
            "check_process": agent_env(TRAINCHECK_MODE="check", TRAINCHECK_INV=str(tmp / "inv.json"),
                                       TRAINCHECK_OUT=str(tmp / "process"), TRAINCHECK_CHECKER="process"),
        }
        report: dict[str, object] = {"steps": args.steps}
        for label, env in modes.items():
            samples, wall, _ = sample_run(cmd, env, args.interval)
            report[label] = figures(samples, wall, args.steps)
        report["violations"] = sum(len(p.read_text().splitlines()) for p in tmp.glob("*/violations-*.jsonl"))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
