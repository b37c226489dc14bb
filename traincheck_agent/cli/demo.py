"""The demo: the whole loop on the bundled CNN, on CPU.

1. collect a clean reference run (``TRAINCHECK_MODE=collect``, the script unchanged);
2. infer invariants from it;
3. run the same script with a silent bug (gradients are never cleared: the loss still goes
   down, nothing raises) under ``TRAINCHECK_MODE=check``: violations are reported while it
   trains, on stderr and in ``violations-0.jsonl``;
4. rank the violations into groups, likely root cause first, and write the HTML report.

Each training run is a child process started exactly as a user would start it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from traincheck_agent.examples import cnn_train
from traincheck_agent.report.sentences import plural
from traincheck_agent.terminal_text import write_line
from traincheck_agent.trace.summary import format_summary, summarize

BUGGY_STEPS = 5


def run_collect(script: Path, out_dir: Path, script_args: list[str]) -> int:
    env = dict(os.environ, TRAINCHECK_MODE="collect", TRAINCHECK_OUT=str(out_dir))
    env.pop("TRAINCHECK_RUN_ID", None)
    cmd = [sys.executable, str(script), *script_args]
    print(f"$ TRAINCHECK_MODE=collect TRAINCHECK_OUT={out_dir} python {' '.join(cmd[1:])}", flush=True)
    return subprocess.run(cmd, env=env).returncode


def run_demo(out_dir: Path, steps: int) -> int:
    from traincheck_agent.inference.engine import infer_invariants
    from traincheck_agent.inference.invariant import write_invariants

    out_dir = Path(out_dir)
    script = Path(cnn_train.__file__)
    reference = out_dir / "reference"
    if run_collect(script, reference, ["--steps", str(steps)]) != 0:
        print("traincheck: error: the reference training failed", file=sys.stderr)
        return 1
    print()
    print(format_summary(summarize([reference])))

    invariants, files = infer_invariants([reference])
    inv_file = out_dir / "invariants.json"
    write_invariants(invariants, inv_file, [str(f) for f in files])
    print(f"\n$ traincheck infer {reference} -o {inv_file}")
    print(f"{plural(len(invariants), 'invariant')} learned, for example:")
    # State invariants first: they say what training does; output dtypes are the long tail.
    for inv in sorted(invariants, key=lambda i: (i.relation != "StateTransition", "finite" in i.description, i.id))[:6]:
        write_line(sys.stdout, f"  {inv.id}  {inv.description}")

    print("\nNow the same script with a silent bug: optimizer.zero_grad() is never called.")
    checked = out_dir / "check"
    if run_check(script, checked, inv_file, ["--steps", str(BUGGY_STEPS), "--bug", "no-zero-grad"]) != 0:
        print("traincheck: error: the buggy training failed", file=sys.stderr)
        return 1
    return show_groups(checked, out_dir / "report.html")


def run_check(script: Path, out_dir: Path, inv_file: Path, script_args: list[str]) -> int:
    env = dict(os.environ, TRAINCHECK_MODE="check", TRAINCHECK_INV=str(inv_file), TRAINCHECK_OUT=str(out_dir))
    env.pop("TRAINCHECK_RUN_ID", None)
    cmd = [sys.executable, str(script), *script_args]
    print(f"$ TRAINCHECK_MODE=check TRAINCHECK_INV={inv_file} TRAINCHECK_OUT={out_dir} "
          f"python {' '.join(cmd[1:])}", flush=True)
    return subprocess.run(cmd, env=env).returncode


def show_groups(checked: Path, report: Path) -> int:
    from traincheck_agent.cli.check_cmd import print_groups
    from traincheck_agent.report.html import read_violations, write_report
    from traincheck_agent.report.triage import judged_counts, triage

    stats: list[dict] = []
    records, _ = read_violations(checked, stats)
    if not records:
        print("\nno violation found")
        return 0
    first = min(r["step"] for r in records)
    print(f"\n{plural(len(records), 'violation')}, the first at step {first}, in {checked}")
    print_groups(triage(records, judged=judged_counts(stats)), sys.stdout, limit=3)
    write_report(checked, report)
    print(f"\n$ traincheck report {checked} -o {report}\nwrote {report}")
    return 0
