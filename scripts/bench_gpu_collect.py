"""Collect-mode overhead on a GPU workload: the bundled transformer LM on CUDA.

Runs ``traincheck_agent/examples/transformer_lm.py`` plain, under collect mode with the default
policy, and under collect mode with state sampled every 10 steps after a 5-step warm-up; each in
a fresh process, started as a user would (the startup hook, or the same gate through a
``sitecustomize`` when the package is only on PYTHONPATH). Reports the median step time of each
and the ratios, as JSON.

    python scripts/bench_gpu_collect.py --size medium --steps 60 --autocast bf16
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "traincheck_agent" / "examples" / "transformer_lm.py"
SAMPLED_POLICY = "sampling: {warmup_steps: 5, every: 10}\n"


def run(mode: str | None, args: argparse.Namespace, tmp: Path, policy: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCHECK_")}
    # Make the startup gate run even where the package is not pip-installed.
    boot = tmp / "boot"
    boot.mkdir(exist_ok=True)
    (boot / "sitecustomize.py").write_text("import traincheck_agent_startup\ntraincheck_agent_startup.run()\n")
    env["PYTHONPATH"] = os.pathsep.join([str(boot), str(REPO), str(REPO / "sitecustomize_pkg"), env.get("PYTHONPATH", "")])
    if mode:
        env.update(TRAINCHECK_MODE=mode, TRAINCHECK_OUT=str(tmp / f"out-{mode}-{policy is not None}"))
        if policy is not None:
            env["TRAINCHECK_POLICY"] = str(policy)
    cmd = [sys.executable, str(EXAMPLE), "--device", args.device, "--size", args.size,
           "--steps", str(args.steps), "--batch-size", str(args.batch_size), "--autocast", args.autocast]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{mode or 'plain'} run failed:\n{proc.stderr[-4000:]}")
    if "[traincheck]" in proc.stderr:
        print(proc.stderr.strip()[-2000:], file=sys.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", default="medium")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--autocast", default="bf16")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        policy = tmp / "sampled.yaml"
        policy.write_text(SAMPLED_POLICY)
        plain = run(None, args, tmp, None)
        collect = run("collect", args, tmp, None)
        sampled = run("collect", args, tmp, policy)
        sizes = {p.parent.name: p.stat().st_size for p in tmp.glob("out-*/*.jsonl")}
    report = {
        "device": args.device, "size": args.size, "parameters": plain["parameters"], "steps": args.steps,
        "median_step_ms": {k: round(v["median_step_s"] * 1e3, 3) for k, v in
                           (("plain", plain), ("collect", collect), ("collect_sampled", sampled))},
        "ratio_collect": round(collect["median_step_s"] / plain["median_step_s"], 3),
        "ratio_collect_sampled": round(sampled["median_step_s"] / plain["median_step_s"], 3),
        "losses_identical": plain["losses"] == collect["losses"] == sampled["losses"],
        "trace_bytes": sizes,
    }
    print(json.dumps(report, indent=2))
    out = os.environ.get("OUT")
    if out:
        Path(out, "gpu_collect.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
