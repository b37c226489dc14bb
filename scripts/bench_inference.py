"""Inference speed: `traincheck infer` over six reference runs of the bundled CNN, and how the
time grows with trace length (steps x1, x2, x4).

Collects the runs first (not timed), then times inference in this process (median of 3).

    python scripts/bench_inference.py --steps 50
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from traincheck_agent.examples import cnn_train
from traincheck_agent.inference.engine import infer_invariants

VARIANTS = [  # six clean references: seeds, optimizers, batch sizes, learning rates
    ["--seed", "0"], ["--seed", "1", "--optimizer", "sgd"], ["--seed", "2", "--batch-size", "16"],
    ["--seed", "3", "--lr", "0.0005"], ["--seed", "4", "--optimizer", "adadelta"], ["--seed", "5", "--batch-size", "64"],
]


def collect(out: Path, steps: int) -> list[Path]:
    dirs = []
    for i, variant in enumerate(VARIANTS):
        run_dir = out / f"run{i}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCHECK_")}
        env.update(TRAINCHECK_MODE="collect", TRAINCHECK_OUT=str(run_dir))
        subprocess.run([sys.executable, cnn_train.__file__, "--steps", str(steps), *variant],
                       env=env, check=True, capture_output=True)
        dirs.append(run_dir)
    return dirs


def time_inference(dirs: list[Path]) -> tuple[float, int, int]:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        invariants, examples = infer_invariants(dirs)
        times.append(time.perf_counter() - started)
    records = sum(1 for d in dirs for f in d.glob("*.jsonl") for _ in f.open("rb"))
    return statistics.median(times), len(invariants), records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    report = {"runs": len(VARIANTS), "by_steps": []}
    with tempfile.TemporaryDirectory() as tmp:
        for factor in (1, 2, 4):
            steps = args.steps * factor
            dirs = collect(Path(tmp) / f"x{factor}", steps)
            seconds, n_invariants, records = time_inference(dirs)
            report["by_steps"].append({"steps_per_run": steps, "records": records, "seconds": round(seconds, 3),
                                       "us_per_record": round(seconds / records * 1e6, 2),
                                       "invariants": n_invariants})
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
