"""The demo: the whole loop on the bundled CNN, on CPU.

1. collect a clean reference run (``TRAINCHECK_MODE=collect``, the script unchanged);
2. infer invariants from it;
3. collect a run of the same script with a silent bug (gradients are never cleared: the loss
   still goes down, nothing raises) and check it against the invariants, offline.

Each training run is a child process started exactly as a user would start it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from traincheck_agent.examples import cnn_train
from traincheck_agent.trace.summary import format_summary, summarize

BUGGY_STEPS = 5


def run_collect(script: Path, out_dir: Path, script_args: list[str]) -> int:
    env = dict(os.environ, TRAINCHECK_MODE="collect", TRAINCHECK_OUT=str(out_dir))
    env.pop("TRAINCHECK_RUN_ID", None)
    cmd = [sys.executable, str(script), *script_args]
    print(f"$ TRAINCHECK_MODE=collect TRAINCHECK_OUT={out_dir} python {' '.join(cmd[1:])}", flush=True)
    return subprocess.run(cmd, env=env).returncode


def run_demo(out_dir: Path, steps: int) -> int:
    from traincheck_agent.inference.engine import check_offline, infer_invariants
    from traincheck_agent.inference.invariant import write_invariants

    out_dir = Path(out_dir)
    script = Path(cnn_train.__file__)
    reference, buggy = out_dir / "reference", out_dir / "buggy"
    if run_collect(script, reference, ["--steps", str(steps)]) != 0:
        print("traincheck: error: the reference training failed", file=sys.stderr)
        return 1
    print()
    print(format_summary(summarize([reference])))

    invariants, files = infer_invariants([reference])
    inv_file = out_dir / "invariants.json"
    write_invariants(invariants, inv_file, [str(f) for f in files])
    print(f"\n$ traincheck infer {reference} -o {inv_file}")
    print(f"{len(invariants)} invariants learned, for example:")
    # State invariants first: they say what training does; output dtypes are the long tail.
    for inv in sorted(invariants, key=lambda i: (i.relation != "StateTransition", "finite" in i.description, i.id))[:6]:
        print(f"  {inv.id}  {inv.description}")

    print("\nNow the same script with a silent bug: optimizer.zero_grad() is never called.")
    if run_collect(script, buggy, ["--steps", str(BUGGY_STEPS), "--bug", "no-zero-grad"]) != 0:
        print("traincheck: error: the buggy training failed", file=sys.stderr)
        return 1
    violations = check_offline(invariants, [buggy])
    print(f"\n$ traincheck check (offline) {buggy} against {inv_file}")
    if not violations:
        print("no violation found")
        return 0
    first_step = violations[0]["step"]
    first = [v for v in violations if v["step"] == first_step]
    print(f"{len(violations)} violations; the first at step {first_step}:")
    for v in first[:5]:
        print(f"  [{v['invariant']}] {v['message']}")
    return 0
