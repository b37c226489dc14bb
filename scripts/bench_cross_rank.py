"""Cross-rank checking as the world grows: DDP on 2, 4 and 8 CPU ranks (torchrun, gloo).

For each world size: collects a clean reference of ``tests/pipelines/ddp_train.py`` and infers
its invariants (CrossRankConsistent on every parameter, CrossRankValue on the batches, and the
single-rank relations), then runs the same script plain and under ``TRAINCHECK_MODE=check``
alternately and reports the median wall time of the whole ``torchrun`` (all ranks) and its
ratio, the time ``traincheck infer`` takes over the reference's traces (it should grow
linearly with the ranks), plus the exchange's own figures that ``TRAINCHECK_DEBUG=1`` prints at exit: store round
trips and bytes per step on rank 0 (the comparer) and on another rank, and the steps whose full
halves rank 0 had to fetch (0 in a clean run: the ranks' digests agree).

    python scripts/bench_cross_rank.py --worlds 2 4 8 --steps 30 --repeats 3

On a 2-core machine every extra rank shares the same two cores, so the wall ratios mostly show
the per-rank agent cost under heavy oversubscription; the exchange figures are exact.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import write_invariants

SCRIPT = Path(__file__).resolve().parent.parent / "tests" / "pipelines" / "ddp_train.py"
EXCHANGE = re.compile(r"cross-rank exchange, rank (\d+): (\d+) steps, ([\d.]+) store round trips and "
                      r"(\d+) B sent, (\d+) B read per step; details fetched for (\d+) steps")


def torchrun(world: int, steps: int, env: dict[str, str], attempts: int = 3) -> tuple[float, str]:
    """Wall time and stderr of one run. A run whose ranks all finished but one then aborted at
    interpreter exit ("terminate called without an active exception": seen with gloo DDP and
    4+ ranks on this torch build, with and without the agent) is run again."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world}", "--standalone",
           str(SCRIPT), "--steps", str(steps)]
    for _ in range(attempts):
        started = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        wall = time.perf_counter() - started
        if proc.returncode == 0:
            return wall, proc.stderr
        finished = proc.stdout.count('"losses"') == world
        if not (finished and "terminate called without an active exception" in proc.stderr):
            break
        print(f"({world} ranks: a rank aborted at exit after finishing; run again)", file=sys.stderr)
    raise SystemExit(f"torchrun failed: {proc.stderr[-2000:]}")


def exchange_figures(stderr: str) -> dict[int, dict[str, float]]:
    out = {}
    for m in EXCHANGE.finditer(stderr):
        rank, steps, trips, sent, read, details = m.groups()
        out[int(rank)] = {"steps": int(steps), "round_trips_per_step": float(trips), "bytes_sent_per_step": int(sent),
                          "bytes_read_per_step": int(read), "details_fetched": int(details)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCHECK_")} | {"OMP_NUM_THREADS": "1"}
    report = {"steps": args.steps, "repeats": args.repeats, "worlds": {}}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for world in args.worlds:
            ref = tmp / f"ref{world}"
            torchrun(world, args.steps, base | {"TRAINCHECK_MODE": "collect", "TRAINCHECK_OUT": str(ref)})
            started = time.perf_counter()
            invariants, files = infer_invariants([ref])
            infer_s = time.perf_counter() - started
            inv = tmp / f"inv{world}.json"
            write_invariants(invariants, inv, [str(f) for f in files])
            walls: dict[str, list[float]] = {"plain": [], "check": []}
            figures: dict[int, dict[str, float]] = {}
            violations = 0
            for i in range(args.repeats):
                walls["plain"].append(torchrun(world, args.steps, base)[0])
                out = tmp / f"check{world}_{i}"
                wall, stderr = torchrun(world, args.steps, base | {
                    "TRAINCHECK_MODE": "check", "TRAINCHECK_INV": str(inv), "TRAINCHECK_OUT": str(out),
                    "TRAINCHECK_DEBUG": "1"})
                walls["check"].append(wall)
                figures = exchange_figures(stderr)
                violations += sum(len(p.read_text().splitlines()) for p in out.glob("violations-*.jsonl"))
            plain, check = statistics.median(walls["plain"]), statistics.median(walls["check"])
            report["worlds"][world] = {
                "invariants": len(invariants),
                "infer_s": round(infer_s, 3),
                "cross_rank_invariants": sum(i.relation.startswith("CrossRank") for i in invariants),
                "wall_plain_s": round(plain, 2), "wall_check_s": round(check, 2),
                "check_ratio": round(check / plain, 3),
                "violations_in_clean_runs": violations,
                "comparer": figures.get(0), "other_rank": figures.get(1),
            }
            print(json.dumps({world: report["worlds"][world]}), file=sys.stderr)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
