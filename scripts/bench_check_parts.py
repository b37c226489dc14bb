"""Where check mode's time goes on the bundled CNN, part by part, timed inside one process
each (steadier than whole-run wall times on a shared machine; ``bench_check_overhead.py`` gives
those, and the training loop's ratio).

- ``judging``: the online checker fed the records of one clean 50-step collect run of the
  example (a superset of what check mode hands it), replayed in a fresh interpreter: ms per run
  and us per record, and the checker's first build there (relation modules, collectors);
- ``snapshots``: the six state snapshots of a training step (before and after ``zero_grad``,
  ``backward`` and the optimizer step), taken through the live agent of a check-mode process
  after a few steps: us per step.

    python scripts/bench_check_parts.py [--repeats 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_check_overhead import write_invariant_files  # noqa: E402

from traincheck_agent.examples import cnn_train  # noqa: E402

EXAMPLE = cnn_train.__file__


def _env(mode: str | None, out_dir: Path, invariants: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCHECK_")}
    if mode:
        env.update(TRAINCHECK_MODE=mode, TRAINCHECK_OUT=str(out_dir), TRAINCHECK_INV=str(invariants))
    return env


def _python(code: str, env: dict[str, str], *args: str) -> dict:
    """Run ``code`` in a fresh interpreter (``args`` in its ``sys.argv[1:]``); its last line of
    output is JSON."""
    proc = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"measurement failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


JUDGING = textwrap.dedent("""
    import json, statistics, sys, time
    from pathlib import Path
    t0 = time.perf_counter()
    from traincheck_agent.check.online import OnlineChecker
    from traincheck_agent.inference.invariant import read_invariants
    from traincheck_agent.trace.reader import TraceFile, find_trace_files
    invariants = read_invariants(Path(sys.argv[1]))
    [path] = find_trace_files([sys.argv[2]])
    trace = TraceFile(path)
    header, records = trace.header, list(trace.records())
    t1 = time.perf_counter()
    OnlineChecker(invariants, print).feed(header)
    build_ms = (time.perf_counter() - t1) * 1e3
    found = []
    def run():
        checker = OnlineChecker(invariants, found.append)
        checker.feed(header)
        start = time.perf_counter()
        for record in records:
            checker.feed(record)
        checker.finish()
        return time.perf_counter() - start
    for _ in range(3):
        run()
    times = [run() for _ in range(int(sys.argv[3]))]
    ms = statistics.median(times) * 1e3
    print(json.dumps({"records": len(records), "run_ms": round(ms, 2), "us_per_record": round(ms * 1e3 / len(records), 2),
                      "checker_build_ms": round(build_ms, 2), "violations": len(found)}))
""")

SNAPSHOTS = textwrap.dedent("""
    import json, runpy, statistics, time
    import torch
    example = runpy.run_path({example!r}, run_name="cnn_example")  # its classes, not its main()
    torch.manual_seed(0)
    model = example["SmallCNN"]()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images, labels = example["synthetic_data"](32, 0).tensors
    for _ in range(3):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
    from traincheck_agent.agent import runtime
    rt = runtime.current
    points = [(w, e) for e in ("zero_grad", "backward", "optimizer.step") for w in ("before", "after")]
    def step():
        for when, event in points:
            rt.probe.snapshot(when, event, 1, optimizer=None if event == "backward" else optimizer)
        rt.writer._buffer.clear()
    for _ in range(50):
        step()
    times = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(200):
            step()
        times.append((time.perf_counter() - start) / 200)
    print(json.dumps({{"us_per_step": round(statistics.median(times) * 1e6, 1)}}))
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20, help="replays of the records (the median counts)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        invariants, _, n_invariants = write_invariant_files(tmp, 50)
        clean = tmp / "clean"
        proc = subprocess.run([sys.executable, EXAMPLE, "--steps", "50", "--seed", "3"],
                              env=_env("collect", clean, invariants), capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"clean run failed: {proc.stderr[-2000:]}")
        report = {
            "invariants": n_invariants,
            "judging": _python(JUDGING, _env(None, tmp, invariants), str(invariants), str(clean), str(args.repeats)),
            "snapshots": _python(SNAPSHOTS.format(example=EXAMPLE), _env("check", tmp / "snap", invariants)),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
