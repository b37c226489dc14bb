"""Cross-rank invariants checked online: halves exchanged through the torch.distributed store."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import PIPELINES, agent_env, run_python

from traincheck_agent.inference.engine import check_offline, infer_invariants
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


def test_online_cross_rank_verdicts_equal_the_offline_ones(tmp_path):
    reference = _collect(tmp_path, "ref")
    invariants, files = infer_invariants([reference])
    inv_file = tmp_path / "inv.json"
    write_invariants(invariants, inv_file, [str(f) for f in files])
    bug = _collect(tmp_path, "bug", "--bug", "clip-on-one-rank")
    online = _replay(tmp_path, bug, inv_file)
    assert "CrossRankConsistent" in online["relations"]
    offline = [v for v in check_offline(invariants, [bug]) if v["relation"] == "CrossRankConsistent"]
    found = [v for v in online["violations"] if v["relation"] == "CrossRankConsistent"]
    assert offline and sorted(map(_key, found)) == sorted(map(_key, offline))
    assert min(v["step"] for v in found) == 0 and {"model.0.weight", "model.0.bias"} <= {v["variable"] for v in found}
    assert not [v for v in online["violations"] if v["relation"] == "CrossRankExchange"]
    clean = _replay(tmp_path, reference, inv_file)
    assert clean["violations"] == []


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
