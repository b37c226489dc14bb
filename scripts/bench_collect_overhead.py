"""Collect-mode overhead on the bundled CNN example: wall time and peak RSS, as ratios.

Runs the example plain and under ``TRAINCHECK_MODE=collect`` alternately (so machine noise
hits both alike) and reports medians:
- process wall time (interpreter start, torch import, training, exit flush),
- training-loop time as the example measures it,
- peak RSS of the child (from ``wait4``),
- the trace size.

    python scripts/bench_collect_overhead.py --steps 50 --repeats 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from traincheck_agent.examples import cnn_train


def run_measured(mode: str | None, steps: int, out_dir: Path, extra_env: dict[str, str] | None = None,
                 tree_memory: bool = False) -> dict[str, float]:
    """Run the example once; ``extra_env`` adds agent variables (e.g. TRAINCHECK_INV).
    ``tree_memory`` also samples the process tree's memory (its polling costs CPU: not in timed
    runs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCHECK_")}
    if mode:
        env.update(TRAINCHECK_MODE=mode, TRAINCHECK_OUT=str(out_dir))
    env.update(extra_env or {})
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, cnn_train.__file__, "--steps", str(steps)],
                                env=env, stdout=out, stderr=err, text=True)
        tree = _TreeMemory(proc.pid) if tree_memory else None
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        if tree is not None:
            tree.stop()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"example failed ({mode}): {err.read()}")
        result = json.loads(out.read().strip().splitlines()[-1])
    figures = {"wall_s": wall, "train_s": result["train_seconds"], "cpu_s": usage.ru_utime + usage.ru_stime,
               "peak_rss_mb": usage.ru_maxrss / 1024}
    if tree is not None:
        figures["tree_rss_mb"] = max(tree.peak_mb, usage.ru_maxrss / 1024)
    return figures


class _TreeMemory(threading.Thread):
    """Samples the summed RSS of a process and its children (a checker process included) every
    50 ms; ``wait4``'s peak covers the one process only."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_mb, self._done = pid, 0.0, threading.Event()
        self.start()

    def run(self) -> None:
        try:
            root = psutil.Process(self.pid)
            while not self._done.wait(0.05):
                procs = [root, *root.children(recursive=True)]
                total = 0
                for p in procs:
                    with contextlib.suppress(psutil.Error):
                        total += p.memory_info().rss
                self.peak_mb = max(self.peak_mb, total / 2**20)
        except psutil.Error:  # the process has ended
            pass

    def stop(self) -> None:
        self._done.set()
        self.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    samples: dict[str, list[dict[str, float]]] = {"plain": [], "collect": []}
    trace_bytes = 0
    with tempfile.TemporaryDirectory() as tmp:
        run_measured(None, args.steps, Path(tmp))  # warm the file cache
        for i in range(args.repeats):
            out_dir = Path(tmp) / f"run{i}"
            samples["plain"].append(run_measured(None, args.steps, out_dir))
            samples["collect"].append(run_measured("collect", args.steps, out_dir))
            trace_bytes = sum(f.stat().st_size for f in out_dir.glob("*.jsonl"))

    def median(mode: str, key: str) -> float:
        return statistics.median(s[key] for s in samples[mode])

    report = {"steps": args.steps, "repeats": args.repeats, "trace_bytes": trace_bytes}
    for key in ("wall_s", "train_s", "peak_rss_mb"):
        plain, collect = median("plain", key), median("collect", key)
        report[key] = {"plain": round(plain, 4), "collect": round(collect, 4), "ratio": round(collect / plain, 3)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
