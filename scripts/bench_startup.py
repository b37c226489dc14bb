"""Measure what the startup hook adds to every Python start while the agent is off.

Every interpreter in an environment with traincheck-agent installed runs the .pth line, so its
cost with TRAINCHECK_MODE unset has to be close to nothing. This builds bare venvs that differ
only in the hook files, times ``python -c pass`` in each (runs interleaved, median taken) and
prints the added milliseconds; a JSON summary goes to stdout.

Configurations:
  baseline     no hook files
  plain_pth    no hook, one .pth holding only a comment: the cost of site.py reading any .pth
               (most environments already have one, e.g. an editable install's)
  hook_unset   the installed hook, TRAINCHECK_MODE unset
  hook_off     the installed hook, TRAINCHECK_MODE=off
  gate_import  a .pth that always imports the gate and calls run(): the Python 3.15+ path, where
               the .start entry point replaces our guarded .pth line

Usage: python scripts/bench_startup.py [--runs 300] [--python /path/to/python3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

HOOK_DIR = Path(__file__).resolve().parents[1] / "sitecustomize_pkg"
ALWAYS_GATE_PTH = "import traincheck_agent_startup as _g; _g.run()\n"


def make_venv(base_python: str, path: Path) -> tuple[Path, Path]:
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return python, Path(out.stdout.strip())


def child_env(mode: str | None) -> dict[str, str]:
    """No TRAINCHECK_* leaking in; bytecode caching on, as in a normal install."""
    skip = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONHOME")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCHECK_") and k not in skip}
    if mode is not None:
        env["TRAINCHECK_MODE"] = mode
    return env


def time_start(python: Path, env: dict[str, str]) -> float:
    begin = time.perf_counter()
    subprocess.run([str(python), "-c", "pass"], env=env, check=True)
    return time.perf_counter() - begin


def pth_line_cost_us(repeat: int = 20000) -> float:
    """exec() of our .pth line with the mode unset, as site.py does it (compile included)."""
    line = (HOOK_DIR / "traincheck_agent.pth").read_text().splitlines()[0]
    saved = os.environ.pop("TRAINCHECK_MODE", None)
    try:
        seconds = min(timeit.repeat(lambda: exec(line, {}), number=repeat, repeat=5))
    finally:
        if saved is not None:
            os.environ["TRAINCHECK_MODE"] = saved
    return seconds / repeat * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="starts per configuration")
    parser.add_argument("--python", default=getattr(sys, "_base_executable", sys.executable))
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="tc-bench-") as tmp:
        root = Path(tmp)
        configs: dict[str, tuple[Path, dict[str, str]]] = {}
        python, _ = make_venv(args.python, root / "baseline")
        configs["baseline"] = (python, child_env(None))
        python, site = make_venv(args.python, root / "plain")
        (site / "some_other_package.pth").write_text("# a .pth with nothing to do\n")
        configs["plain_pth"] = (python, child_env(None))
        python, site = make_venv(args.python, root / "hook")
        for name in (
            "traincheck_agent.pth",
            "traincheck_agent.start",
            "traincheck_agent_startup.py",
        ):
            shutil.copy2(HOOK_DIR / name, site / name)
        configs["hook_unset"] = (python, child_env(None))
        configs["hook_off"] = (python, child_env("off"))
        python, site = make_venv(args.python, root / "gate")
        shutil.copy2(HOOK_DIR / "traincheck_agent_startup.py", site / "traincheck_agent_startup.py")
        (site / "traincheck_agent_gate_always.pth").write_text(ALWAYS_GATE_PTH)
        configs["gate_import"] = (python, child_env(None))

        samples: dict[str, list[float]] = {name: [] for name in configs}
        for python, env in configs.values():  # warm caches and write the gate's .pyc
            for _ in range(5):
                time_start(python, env)
        for _ in range(args.runs):  # interleaved, so drift hits every configuration alike
            for name, (python, env) in configs.items():
                samples[name].append(time_start(python, env))

    median_ms = {name: statistics.median(values) * 1e3 for name, values in samples.items()}
    base = median_ms["baseline"]
    result = {
        "python": sys.version.split()[0],
        "runs_per_config": args.runs,
        "median_ms": {k: round(v, 3) for k, v in median_ms.items()},
        "added_ms": {k: round(v - base, 3) for k, v in median_ms.items() if k != "baseline"},
        "added_vs_plain_pth_ms": {
            k: round(v - median_ms["plain_pth"], 3)
            for k, v in median_ms.items()
            if k not in ("baseline", "plain_pth")
        },
        "pth_line_exec_us": round(pth_line_cost_us(), 2),
    }
    for name, added in result["added_ms"].items():
        print(
            f"{name:12s} adds {added:+.3f} ms to `python -c pass` ({base:.2f} ms)", file=sys.stderr
        )
    for name, added in result["added_vs_plain_pth_ms"].items():
        print(f"{name:12s} adds {added:+.3f} ms over a venv with another .pth", file=sys.stderr)
    print(f".pth line with mode unset: {result['pth_line_exec_us']} us per exec", file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
