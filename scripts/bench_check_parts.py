"""Where check mode's time goes, part by part, timed inside one process each (steadier than
whole-run wall times on a shared machine; ``bench_check_overhead.py`` gives those, and the
training loop's ratio). Two workloads (``--example``): the bundled CNN (``cnn``, about 6 ms a
step on 2 cores) and a GPT-style decoder trained with AdamW on random tokens (``gpt``, the
bundled ``transformer_lm`` at its ``bench`` size, about 30 ms a step); the invariants come from
two clean reference runs of the same example.

- ``judging``: the online checker fed the records of one clean 50-step collect run of the
  example (a superset of what check mode hands it; a snapshot point is one record, as the agent
  hands it), replayed in a fresh interpreter: ms per run and per step, us per record, and the
  checker's first build there (relation modules, collectors);
- ``snapshots``: the six state snapshots of a training step (before and after ``zero_grad``,
  ``backward`` and the optimizer step), taken through the live agent of a check-mode process
  after a few steps: us per step; and the fingerprinting alone (the same tensors hashed
  without the rest of a snapshot: the floor of what full fingerprints cost), with the tensors
  and megabytes hashed per step;
- ``in_loop``: what the agent adds to a training step of the example's loop, where torch's own
  work runs between the agent's (its caches and branch history lost in between): one check-mode
  process switches the agent off and on in alternating blocks of steps (switched off, every
  wrapper passes straight through) and takes the difference of each pair of blocks' median
  step times; the median over the pairs is immune to the machine's drift that whole-run
  comparisons suffer. The same with the judging and / or the snapshots switched off tells
  what each costs inside the loop, and the same loop in collect mode what recording the whole
  trace costs (``collect_step_ratio``). A block's first step is left out: the agent did not see the
  step before it.

    python scripts/bench_check_parts.py [--example cnn|gpt] [--repeats 20] [--loop-steps 400 --block 10 --loop-runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_check_overhead import violations_in  # noqa: E402

from traincheck_agent.examples import cnn_train, transformer_lm  # noqa: E402
from traincheck_agent.inference.engine import infer_invariants  # noqa: E402
from traincheck_agent.inference.invariant import write_invariants  # noqa: E402

GPT_SIZE, GPT_BATCH = "bench", "4"

# Each example: its script, the arguments of its collected runs (references and the replayed
# clean run) and the Python that builds its model and defines ``step()``, one training step,
# inside the measuring interpreter (``steps``: how many it will take). The classes are named as
# in the references, which ran the script as ``__main__``.
EXAMPLES = {
    "cnn": (cnn_train.__file__, [], textwrap.dedent("""
        from torch.utils.data import DataLoader
        example = runpy.run_path({script!r}, run_name="bench_example")  # its classes, not its main()
        example["SmallCNN"].__module__ = "__main__"
        torch.manual_seed(0)
        model = example["SmallCNN"]()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        loss_fn = torch.nn.CrossEntropyLoss()
        batches = iter(DataLoader(example["synthetic_data"]((steps + 8) * 32, 0), batch_size=32, shuffle=True,
                                  generator=torch.Generator().manual_seed(0)))
        def step():
            images, labels = next(batches)
            model.train()
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            loss.item()
    """)),
    "gpt": (transformer_lm.__file__, ["--size", GPT_SIZE, "--batch-size", GPT_BATCH], textwrap.dedent(f"""
        example = runpy.run_path({{script!r}}, run_name="bench_example")
        for name in ("TinyLM", "Block", "Float32Linear"):
            example[name].__module__ = "__main__"
        d, layers, heads, vocab, context = example["SIZES"][{GPT_SIZE!r}]
        torch.manual_seed(0)
        model = example["TinyLM"](d, layers, heads, vocab, context)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        gen = torch.Generator().manual_seed(0)
        def step():
            tokens = torch.randint(0, vocab, ({GPT_BATCH}, context + 1), generator=gen)
            optimizer.zero_grad()
            logits = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, vocab), tokens[:, 1:].reshape(-1))
            loss.backward()
            optimizer.step()
            loss.item()
    """)),
}


def _collect(example: str, out_dir: Path, steps: int, seed: int) -> Path:
    script, args, _ = EXAMPLES[example]
    proc = subprocess.run([sys.executable, script, *args, "--steps", str(steps), "--seed", str(seed)],
                          env=_env("collect", out_dir, out_dir), capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"collect run failed: {proc.stderr[-2000:]}")
    return out_dir


def _invariants(example: str, tmp: Path, steps: int) -> tuple[Path, int]:
    """The invariants of two clean reference runs (seeds 1 and 2), in a file."""
    refs = [_collect(example, tmp / f"ref{seed}", steps, seed) for seed in (1, 2)]
    invariants, files = infer_invariants(refs)
    path = tmp / "inv.json"
    write_invariants(invariants, path, [str(f) for f in files])
    return path, len(invariants)


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
    header, records = trace.header, list(trace.records(expand_snapshots=False))  # as the agent feeds them
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
    steps = max(1, len({r.get("step") for r in records if isinstance(r.get("step"), int) and r["step"] >= 0}))
    print(json.dumps({"records": len(records), "run_ms": round(ms, 2), "ms_per_step": round(ms / steps, 3),
                      "us_per_record": round(ms * 1e3 / len(records), 2),
                      "checker_build_ms": round(build_ms, 2), "violations": len(found)}))
""")

SNAPSHOTS = textwrap.dedent("""
    import json, runpy, statistics, time
    import torch
    steps = 3
    {setup}
    for _ in range(steps):
        step()
    from traincheck_agent.agent import runtime
    rt = runtime.current
    points = [(w, e) for e in ("zero_grad", "backward", "optimizer.step") for w in ("before", "after")]
    def snapshots():
        for when, event in points:
            rt.probe.snapshot(when, event, 1, optimizer=None if event == "backward" else optimizer)
        rt.writer._buffer.clear()
        rt.writer._held = 0
    for _ in range(50):
        snapshots()
    times = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(200):
            snapshots()
        times.append((time.perf_counter() - start) / 200)
    # The fingerprinting alone: the same tensors, hashed without the rest of a snapshot.
    from traincheck_agent.agent.record import state_probe
    hashed, fingerprint_tensors = [], state_probe.fingerprint_tensors
    state_probe.fingerprint_tensors = lambda tensors: (hashed.append(list(tensors)), fingerprint_tensors(tensors))[1]
    snapshots()
    state_probe.fingerprint_tensors = fingerprint_tensors
    hash_times = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(200):
            for tensors in hashed:
                fingerprint_tensors(tensors)
        hash_times.append((time.perf_counter() - start) / 200)
    print(json.dumps({{"us_per_step": round(statistics.median(times) * 1e6, 1),
                      "fingerprint_us_per_step": round(statistics.median(hash_times) * 1e6, 1),
                      "tensors_per_step": sum(map(len, hashed)),
                      "mb_hashed_per_step": round(sum(t.nbytes for ts in hashed for t in ts) / 1e6, 2)}}))
""")


IN_LOOP = textwrap.dedent("""
    import json, runpy, statistics, sys, time
    import torch
    from traincheck_agent.agent import runtime
    from traincheck_agent.agent.record.state_probe import StateProbe
    from traincheck_agent.agent.checking.check_mode import CheckSink
    without = set(filter(None, sys.argv[1].split(",")))
    if "snapshots" in without:
        StateProbe.snapshot = lambda self, *args, **kwargs: None
    if "judging" in without:
        CheckSink._feed_here = lambda self, records: None
    steps, block = int(sys.argv[2]), int(sys.argv[3])
    {setup}
    agent = runtime.current
    blocks = {{True: [], False: []}}
    for i in range(steps):
        agent_on = (i // block) % 2 == 0
        runtime.current = agent if agent_on else None
        start = time.perf_counter()
        step()
        elapsed = time.perf_counter() - start
        if i % block == 0:
            blocks[agent_on].append([])
        else:
            blocks[agent_on][-1].append(elapsed)
    runtime.current = agent
    pairs = [statistics.median(a) - statistics.median(b) for a, b in zip(blocks[True], blocks[False])]
    on = [t for b in blocks[True] for t in b]
    off = [t for b in blocks[False] for t in b]
    print(json.dumps({{"overhead_ms": statistics.median(pairs) * 1e3, "on_ms": statistics.median(on) * 1e3,
                      "off_ms": statistics.median(off) * 1e3}}))
""")


def _program(template: str, example: str) -> str:
    script, _, setup = EXAMPLES[example]
    return template.format(setup=setup.format(script=script))


def in_loop(example: str, invariants: Path, out_dir: Path, steps: int, block: int, runs: int) -> dict[str, object]:
    """Per-step cost of the agent in the loop, whole and without judging / snapshots (ms): the
    median of ``runs`` processes each."""
    variants = {"agent": "", "without_judging": "judging", "without_snapshots": "snapshots",
                "without_both": "judging,snapshots", "collect": ""}
    found: dict[str, list[dict]] = {label: [] for label in variants}
    for run in range(runs):
        for label, without in variants.items():  # interleaved: drift hits every variant alike
            env = _env("collect" if label == "collect" else "check", out_dir / f"{label}{run}", invariants)
            found[label].append(_python(_program(IN_LOOP, example), env, without, str(steps), str(block)))
    report: dict[str, object] = {}
    for label, results in found.items():
        report[f"{label}_ms_per_step"] = round(statistics.median(r["overhead_ms"] for r in results), 3)
    plain = statistics.median(r["off_ms"] for r in found["agent"])
    report["plain_ms_per_step"] = round(plain, 3)
    report["step_ratio"] = round((plain + report["agent_ms_per_step"]) / plain, 3)  # type: ignore[operator]
    report["collect_step_ratio"] = round((plain + report["collect_ms_per_step"]) / plain, 3)  # type: ignore[operator]
    report["violations"] = sum(violations_in(out_dir / f"agent{run}") for run in range(runs))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", choices=sorted(EXAMPLES), default="cnn", help="the workload")
    parser.add_argument("--reference-steps", type=int, default=50, help="steps of each reference run")
    parser.add_argument("--repeats", type=int, default=20, help="replays of the records (the median counts)")
    parser.add_argument("--loop-steps", type=int, default=400, help="steps of each in-loop process")
    parser.add_argument("--block", type=int, default=10, help="steps per on / off block in the loop")
    parser.add_argument("--loop-runs", type=int, default=3, help="in-loop processes per variant")
    args = parser.parse_args()
    if args.block < 2 or args.loop_steps < 4 * args.block:
        parser.error("--block must be 2 or more (a block's first step is left out), and --loop-steps at "
                     "least four blocks")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        invariants, n_invariants = _invariants(args.example, tmp, args.reference_steps)
        clean = _collect(args.example, tmp / "clean", args.reference_steps, 3)
        report = {
            "example": args.example,
            "invariants": n_invariants,
            "judging": _python(JUDGING, _env(None, tmp, invariants), str(invariants), str(clean), str(args.repeats)),
            "snapshots": _python(_program(SNAPSHOTS, args.example), _env("check", tmp / "snap", invariants)),
            "in_loop": in_loop(args.example, invariants, tmp / "loop", args.loop_steps, args.block, args.loop_runs),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
