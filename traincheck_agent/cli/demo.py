"""The demo: train the bundled CNN in collect mode, then summarise what was recorded.

The example runs in a child process started exactly as a user would start it, with
``TRAINCHECK_MODE=collect`` in its environment and the script unchanged.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from traincheck_agent.examples import cnn_train
from traincheck_agent.trace.summary import format_summary, summarize


def run_collect(script: Path, out_dir: Path, script_args: list[str]) -> int:
    env = dict(os.environ, TRAINCHECK_MODE="collect", TRAINCHECK_OUT=str(out_dir))
    env.pop("TRAINCHECK_RUN_ID", None)
    cmd = [sys.executable, str(script), *script_args]
    print(f"$ TRAINCHECK_MODE=collect TRAINCHECK_OUT={out_dir} {' '.join(cmd[1:])}", flush=True)
    return subprocess.run(cmd, env=env).returncode


def run_demo(out_dir: Path, steps: int) -> int:
    out_dir = Path(out_dir)
    reference = out_dir / "reference"
    code = run_collect(Path(cnn_train.__file__), reference, ["--steps", str(steps)])
    if code != 0:
        print(f"traincheck: error: the example training exited with status {code}", file=sys.stderr)
        return 1
    print()
    print(format_summary(summarize([reference])))
    print(f"\nTraces are in {reference}/ (one JSON-lines file per process).")
    return 0
