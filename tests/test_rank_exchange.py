"""Cross-rank invariants checked online: halves exchanged through the torch.distributed store."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PIPELINES, agent_env, run_python

from traincheck_agent.check.offline import check_offline
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import write_invariants


def _torchrun(script: str, *args: str, env: dict | None = None) -> None:
    cmd = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", str(PIPELINES / script), *args]
    proc = run_python(cmd, env)
    assert proc.returncode == 0, proc.stderr


def _collect(root: Path, name: str, *args: str) -> Path:
    out = root / name
    _torchrun("tp_train.py", *args, env=agent_env("collect", out, OMP_NUM_THREADS="1"))
    return out


def _replay(root: Path, traces: Path, invariants: Path, *args: str) -> dict:
    out = root / f"online-{traces.name}.json"
    _torchrun("online_exchange.py", str(traces), str(invariants), str(out), *args, env={"OMP_NUM_THREADS": "1"})
    return json.loads(out.read_text())


def _key(v: dict) -> tuple:
    return v["invariant"], v["step"], v.get("variable", ""), tuple(v.get("ranks", ()))


@pytest.mark.slow
def test_online_cross_rank_verdicts_equal_the_offline_ones(tmp_path, torchrun_traces):
    reference = torchrun_traces("tp_train.py", "--steps", "6")
    invariants, files = infer_invariants([reference])
    inv_file = tmp_path / "inv.json"
    write_invariants(invariants, inv_file, [str(f) for f in files])
    bug = torchrun_traces("tp_train.py", "--bug", "clip-on-one-rank")
    online = _replay(tmp_path, bug, inv_file)
    assert "CrossRankConsistent" in online["relations"]
    offline = [v for v in check_offline(invariants, [bug]) if v["relation"] == "CrossRankConsistent"]
    found = [v for v in online["violations"] if v["relation"] == "CrossRankConsistent"]
    assert offline and sorted(map(_key, found)) == sorted(map(_key, offline))
    assert min(v["step"] for v in found) == 0 and {"model.0.weight", "model.0.bias"} <= {v["variable"] for v in found}
    assert not [v for v in online["violations"] if v["relation"] == "CrossRankExchange"]
    clean = _replay(tmp_path, reference, inv_file)
    assert clean["violations"] == []


@pytest.mark.slow
def test_a_rank_that_stops_publishing_is_reported_not_waited_for(tmp_path):
    reference = _collect(tmp_path, "ref", "--steps", "5")
    invariants, files = infer_invariants([reference])
    inv_file = tmp_path / "inv.json"
    write_invariants(invariants, inv_file, [str(f) for f in files])
    online = _replay(tmp_path, reference, inv_file, "--stop-rank1-at", "2", "--timeout", "1")
    missing = [v for v in online["violations"] if v["relation"] == "CrossRankExchange"]
    assert len(missing) == 1 and missing[0]["ranks"] == [1] and missing[0]["step"] == 2  # reported once
    assert "published nothing for step 2" in missing[0]["message"]
    assert online["finish_seconds"] < 5  # the timeout, not a hang
    assert [v for v in online["violations"] if v["relation"] != "CrossRankExchange"] == []


REPLICAS = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", str(PIPELINES / "replicas_train.py")]


@pytest.fixture(scope="module")
def replicas_invariants(tmp_path_factory) -> Path:
    """The invariants file of a clean 2-rank run of replicas that never communicate."""
    root = tmp_path_factory.mktemp("replicas")
    proc = run_python(REPLICAS, agent_env("collect", root / "ref", OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr
    invariants, files = infer_invariants([root / "ref"])
    assert any(i.relation == "CrossRankConsistent" for i in invariants)
    inv_file = root / "inv.json"
    write_invariants(invariants, inv_file, [str(f) for f in files])
    return inv_file


@pytest.mark.slow
def test_a_rank_that_dies_mid_run_is_reported_and_the_others_finish(tmp_path, replicas_invariants):
    """A real rank lost mid-run (it leaves with ``os._exit`` at step 3, publishing nothing more):
    the surviving rank trains to the end, reports the missing peer once, and does not hang."""
    out = tmp_path / "check"
    started = time.monotonic()
    proc = run_python([*REPLICAS, "--die-at", "3"],
                      agent_env("check", out, OMP_NUM_THREADS="1", TRAINCHECK_INV=str(replicas_invariants)))
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert '"rank": 0' in proc.stdout  # the survivor trained to the end
    found = [v for line in (out / "violations-0.jsonl").read_text().splitlines()
             if (v := json.loads(line)).get("event") != "coverage"]
    missing = [v for v in found if v["relation"] == "CrossRankExchange"]
    # Reported once, at the first step it did not publish (at the latest the one it died in).
    assert len(missing) == 1 and missing[0]["ranks"] == [1] and missing[0]["step"] <= 3
    assert [v for v in found if v["relation"] != "CrossRankExchange"] == []  # no false drift reported
    assert elapsed < 120  # bounded by the final grace period, never the 60 s per-step timeout per step


@pytest.mark.slow
def test_a_disagreement_at_the_last_step_is_judged_after_the_other_rank_has_gone(tmp_path, replicas_invariants):
    """The comparer judges the last step at its exit and asks for the halves of a step whose
    digests disagree; the other rank (these replicas never wait for each other) may have left
    by then, so at its exit it sent the halves of every step not judged yet, unasked."""
    out = tmp_path / "check"
    proc = run_python([*REPLICAS, "--drift-at", "6"], agent_env(
        "check", out, OMP_NUM_THREADS="1", TRAINCHECK_INV=str(replicas_invariants), TRAINCHECK_DEBUG="1"))
    assert proc.returncode == 0, proc.stderr
    found = [v for line in (out / "violations-0.jsonl").read_text().splitlines()
             if (v := json.loads(line)).get("event") != "coverage"]
    assert not [v for v in found if v["relation"] == "CrossRankExchange"]
    drift = [v for v in found if v["relation"] == "CrossRankConsistent"]
    assert {v["step"] for v in drift} == {7} and "model.0.weight" in {v["variable"] for v in drift}
    assert all(v["ranks"] == [0, 1] for v in drift)
    assert "details fetched for 1 steps" in proc.stderr  # only the step that disagreed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_nodes(out: Path, mode: str, *args: str, **env: str) -> list[subprocess.CompletedProcess]:
    """Two torchrun launchers, one rank each, joined by a c10d rendezvous: two nodes on one host."""
    port = _free_port()
    cmd = ["-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=job42", str(PIPELINES / "replicas_train.py"), *args]
    full = agent_env(mode, out, OMP_NUM_THREADS="1", **env)
    nodes = [subprocess.Popen([sys.executable, *cmd], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    done = []
    for node in nodes:
        stdout, stderr = node.communicate(timeout=240)
        done.append(subprocess.CompletedProcess(node.args, node.returncode, stdout, stderr))
    assert all(p.returncode == 0 for p in done), [p.stderr[-2000:] for p in done]
    return done


@pytest.mark.slow
def test_ranks_on_two_nodes_share_the_rendezvous_run_id_and_are_compared(tmp_path):
    """Each node's launcher would make its own run id; the ranks take the rendezvous id, so their
    traces merge by (run id, rank) and the cross-rank exchange finds every rank's keys."""
    reference = tmp_path / "ref"
    _two_nodes(reference, "collect")
    names = sorted(p.name for p in reference.glob("trace_*.jsonl"))
    assert [n.split("_pid")[0] for n in names] == ["trace_rdzv-job42_rank0", "trace_rdzv-job42_rank1"]
    invariants, files = infer_invariants([reference])
    inv_file = tmp_path / "inv.json"
    write_invariants(invariants, inv_file, [str(f) for f in files])
    out = tmp_path / "check"
    _two_nodes(out, "check", "--drift-at", "3", TRAINCHECK_INV=str(inv_file))
    found = [v for line in (out / "violations-0.jsonl").read_text().splitlines()
             if (v := json.loads(line)).get("event") != "coverage"]
    assert not [v for v in found if v["relation"] == "CrossRankExchange"]  # every rank's keys were found
    drift = [v for v in found if v["relation"] == "CrossRankConsistent"]
    assert min(v["step"] for v in drift) == 4  # the step after the nudge, on the other node
    assert "model.0.weight" in {v["variable"] for v in drift if v["step"] == 4}


def test_details_are_sent_only_when_the_comparer_asks_and_at_exit_for_open_steps():
    """Through a real store: a summary goes out every step, a rank's halves only when the
    comparer asks for that step (seen at the rank's next step) or, at exit, for the steps the
    comparer has not judged yet."""
    import torch.distributed as dist

    from traincheck_agent.check.rank_exchange import StoreExchange

    store = dist.HashStore()
    comparer = StoreExchange(store, 0, 2, "run", timeout_s=60.0)
    rank1 = StoreExchange(store, 1, 2, "run")
    held = {step: {"h": {"CrossRankConsistent": [[step]]}} for step in (3, 4, 5)}
    for step in (3, 4):
        rank1.publish(step, {"s": {"world": f"digest{step}"}, "x": {}})
    assert rank1.requested_steps() == []
    assert rank1.stats.bytes_sent < 100 and not store.check(["traincheck/run/0/3/details"])
    summaries, missing = comparer.fetch_summaries(3)
    assert list(summaries) == [1] and missing == []
    comparer.request_details(3)
    assert comparer.fetch_details(3, [1]) is None  # asked, not sent yet: waiting, not missing
    assert rank1.requested_steps() == [3] and rank1.requested_steps() == []  # each request read once
    rank1.publish_details(3, held.pop(3))
    details, missing = comparer.fetch_details(3, [1])
    assert details[1]["h"] == {"CrossRankConsistent": [[3]]} and missing == []
    comparer.forget(3)
    assert not rank1.still_open(3) and rank1.still_open(4) and not rank1.still_open(5)
    comparer.close()
    assert not store.check(["traincheck/run/0/requests"]) and not store.check(["traincheck/run/0/request/0"])


def test_a_rank_that_does_not_send_asked_details_is_reported_after_the_timeout():
    import torch.distributed as dist

    from traincheck_agent.check.rank_exchange import StoreExchange

    comparer = StoreExchange(dist.HashStore(), 0, 3, "run", timeout_s=0.0)
    comparer.request_details(2)
    assert comparer.fetch_details(2, [1, 2]) == ({}, [1, 2])
