"""The checker process: the online checker judging in a child process, fed through a pipe. It
must report what the in-process checker reports, survive being killed (checking carries on in
the training process) and never be held open by forked DataLoader workers."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import time
from pathlib import Path

import orjson
import pytest
from conftest import MLP, agent_env, collect_mlp_here, read_traces, run_python

from traincheck_agent.agent.checking.check_mode import CheckSink
from traincheck_agent.agent.checking.checker_worker import serve
from traincheck_agent.check.online import OnlineChecker
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import Invariant, write_invariants


@pytest.fixture(scope="module")
def learned(tmp_path_factory) -> tuple[Path, list[Invariant], list[dict]]:
    """Invariants of a clean MLP run, and the records (header first) of a run that forgets
    zero_grad."""
    root = tmp_path_factory.mktemp("checker_process")
    invariants, files = infer_invariants([collect_mlp_here(root, "ref", "--steps", "8")])
    path = root / "inv.json"
    write_invariants(invariants, path, [str(f) for f in files])
    (trace,) = read_traces(collect_mlp_here(root, "bug", "--steps", "5", "--bug", "no-zero-grad"))
    return path, invariants, [trace.header, *trace.records]


def _key(violation: dict) -> tuple:
    return (violation["invariant"], violation["step"], violation.get("variable"), violation.get("api"),
            violation["message"])


def _in_thread(invariants: list[Invariant], records: list[dict], coverage: list | None = None) -> list[dict]:
    found: list[dict] = []
    checker = OnlineChecker(invariants, found.append)
    for record in records:
        checker.feed(record)
    checker.finish()
    if coverage is not None:
        coverage.append(checker.coverage.to_json())
    return found


@pytest.mark.slow
def test_worker_reports_what_the_in_process_checker_finds(learned):
    _, invariants, records = learned
    coverage: list[dict] = []
    expected = _in_thread(invariants, records, coverage)
    assert expected, "the buggy run must violate something"
    lines = [orjson.dumps({"invariants": [i.to_json() for i in invariants]})]
    lines += [orjson.dumps(records[k:k + 50]) for k in range(0, len(records), 50)]
    out = io.BytesIO()
    assert serve(io.BytesIO(b"\n".join(lines) + b"\n"), out) == len(records)
    messages = [json.loads(line) for line in out.getvalue().splitlines()]
    # The last message also carries what was judged and what was outside the domains.
    assert messages[-1] == {"done": {"fed": len(records), "coverage": coverage[0]}}
    assert sum(coverage[0]["checked"].values()) > 0
    assert not [m for m in messages if "error" in m]
    got = [m["violation"] for m in messages if "violation" in m]
    assert sorted(map(_key, got)) == sorted(map(_key, expected))


@pytest.mark.slow
def test_process_and_thread_checkers_log_the_same_violations(learned, tmp_path):
    inv_path, _, _ = learned
    runs = {}
    for kind in ("process", "thread"):
        out = tmp_path / kind
        proc = run_python([MLP, "--steps", "5", "--bug", "no-zero-grad"],
                          agent_env("check", out, TRAINCHECK_INV=str(inv_path), TRAINCHECK_CHECKER=kind,
                                    TRAINCHECK_DEBUG="1"))
        assert proc.returncode == 0, proc.stderr
        assert ("checking in a child process" in proc.stderr) == (kind == "process")
        logged = [v for line in (out / "violations-0.jsonl").read_text().splitlines()
                  if (v := json.loads(line)).get("event") != "coverage"]
        runs[kind] = sorted((v["invariant"], v["step"], v.get("variable"), v.get("api"), v["message"])
                            for v in logged)
        assert "[traincheck] check summary (rank 0): " in proc.stderr
    assert runs["process"] and runs["process"] == runs["thread"]


@pytest.mark.slow
def test_a_killed_checker_process_hands_over_to_the_training_process(learned, tmp_path, capsys):
    _, invariants, records = learned
    half = next(k for k, r in enumerate(records) if r.get("step") == 2)
    sink = CheckSink(invariants, out_dir=tmp_path, checker="process")
    sink.consume(records[:half])
    assert sink.process is not None
    os.kill(sink.process.proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while sink.process is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sink.process is None, "the loss of the checker process went unnoticed"
    sink.consume(records[half:])
    sink.close()
    err = capsys.readouterr().err
    assert "the checker process ended (exit status -9) before the run did; checking continues in the " \
           "training process" in err
    logged = [v for line in (tmp_path / "violations-0.jsonl").read_text().splitlines()
              if (v := json.loads(line)).get("event") != "coverage"]
    later = {(v["invariant"], v["step"], v.get("variable") or None) for v in logged if v["step"] >= 3}
    expected = {(v["invariant"], v["step"], v.get("variable") or None)
                for v in _in_thread(invariants, records) if v["step"] >= 3}
    assert expected and later == expected  # from the next step on, nothing is missed
    assert "check summary (rank 0): " in err


FORKING = '''
import json, os, sys, time, torch
from torch import nn
gen = torch.Generator().manual_seed(0)
x, y = torch.randn(64, 8, generator=gen), torch.randint(0, 2, (64,), generator=gen)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for step in range(6):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
    if step == 2 and sys.argv[1:] == ["fork"]:
        time.sleep(0.3)  # the checker has started by now
        child = os.fork()
        if child == 0:  # a helper process that outlives the training loop
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            time.sleep(float(os.environ.get("HELPER_SECONDS", "60")))
            os._exit(0)
        print(json.dumps({"helper": child}), flush=True)
print(json.dumps({"losses": losses}))
'''


@pytest.mark.slow
def test_a_forked_helper_does_not_hold_the_checker_open(tmp_path):
    """A child forked after the checker started inherits the pipe to it and drops its copy, so
    the checker sees the end of its input when the training process closes it, however long
    the helper lives."""
    script = tmp_path / "forking.py"
    script.write_text(FORKING)
    ref = run_python([str(script)], agent_env("collect", tmp_path / "ref"))
    assert ref.returncode == 0, ref.stderr
    invariants, files = infer_invariants([tmp_path / "ref"])
    inv_path = tmp_path / "inv.json"
    write_invariants(invariants, inv_path, [str(f) for f in files])
    proc = run_python([str(script), "fork"],
                      agent_env("check", tmp_path / "check", TRAINCHECK_INV=str(inv_path), TRAINCHECK_DEBUG="1",
                                TRAINCHECK_CHECKER="process", TRAINCHECK_FLUSH_INTERVAL="0.05"), timeout=120)
    helper = json.loads(proc.stdout.splitlines()[0])["helper"]
    try:
        assert proc.returncode == 0, proc.stderr
        assert "checking in a child process" in proc.stderr
        assert "did not finish within" not in proc.stderr
        assert "[traincheck] check summary (rank 0): no violations" in proc.stderr
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(helper, signal.SIGKILL)


def test_settings_choose_the_checker_and_the_hand_over_interval(capsys):
    from traincheck_agent.settings import Settings

    assert Settings.from_env({"TRAINCHECK_MODE": "check"}).checker == "auto"
    assert Settings.from_env({"TRAINCHECK_MODE": "check", "TRAINCHECK_CHECKER": " Thread "}).checker == "thread"
    bad = Settings.from_env({"TRAINCHECK_MODE": "check", "TRAINCHECK_CHECKER": "gpu"})
    assert bad.checker == "auto"
    assert "TRAINCHECK_CHECKER='gpu' is not one of auto, process, thread; using auto" in capsys.readouterr().err


@pytest.mark.parametrize(("env", "cores", "spare"), [
    ({}, 2, False),  # torch's default threads fill the cores
    ({"OMP_NUM_THREADS": "1"}, 2, True),
    ({"OMP_NUM_THREADS": "1", "LOCAL_WORLD_SIZE": "2"}, 2, False),  # two ranks, one thread each
    ({"OMP_NUM_THREADS": "1", "LOCAL_WORLD_SIZE": "8"}, 64, True),  # a GPU node
    ({"OMP_NUM_THREADS": "zero"}, 4, False),  # unreadable: torch's default
])
def test_auto_checker_takes_a_process_only_where_a_core_is_left_over(env, cores, spare):
    from traincheck_agent.agent.checking.checker_process import spare_core

    assert spare_core(env, cores=cores) is spare


@pytest.mark.slow
def test_raise_and_abort_always_check_in_the_training_process(learned, tmp_path):
    _, invariants, records = learned
    for action in ("raise", "abort"):
        sink = CheckSink(invariants, out_dir=tmp_path / action, action=action, checker="process")
        sink.start_process()
        assert sink.process is None and sink.checker_kind == "thread"


@pytest.mark.slow
def test_a_checker_process_lost_before_the_first_record_leaves_a_full_checker_here(learned, tmp_path, capsys):
    _, invariants, records = learned
    sink = CheckSink(invariants, out_dir=tmp_path, checker="process")
    sink.start_process()  # as bootstrap does, before anything is recorded
    os.kill(sink.process.proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while sink.process is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sink.process is None
    assert "checking continues in the training process" in capsys.readouterr().err
    sink.consume(records)
    sink.close()
    logged = [v for line in (tmp_path / "violations-0.jsonl").read_text().splitlines()
              if (v := json.loads(line)).get("event") != "coverage"]
    assert sorted(_key(v) for v in logged) == sorted(
        (v["invariant"], v["step"], v.get("variable") or None, v.get("api") or None, v["message"])
        for v in _in_thread(invariants, records))
