"""`traincheck report`: the HTML report from the violations of a real buggy run, and from
hand-made records (escaping, several ranks, torn and damaged files)."""

from __future__ import annotations

import html
import io
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import PIPELINES, collect_in_process

from traincheck_agent.report.violations import ViolationLog, violation_record

# Every test here starts Python child processes (real training under the agent, launchers, the
# startup hook, the CLI): the slow tier.
pytestmark = pytest.mark.slow

MLP = str(PIPELINES / "mlp_train.py")


def traincheck(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traincheck_agent", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


class _Tags(HTMLParser):
    """Every start tag with its attributes, to look for external resources."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(page: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(page)
    return parser.tags


def _assert_self_contained(page: str) -> None:
    assert "http://" not in page and "https://" not in page
    tags = _tags(page)
    assert not [t for t, _ in tags if t in ("script", "link", "img", "iframe", "object", "embed")]
    for _, attrs in tags:
        for name in ("src", "href"):
            assert attrs.get(name) is None or attrs[name].startswith("#")


@pytest.fixture(scope="module")
def buggy_check(tmp_path_factory) -> Path:
    """Violations of a run that forgot zero_grad, checked against a clean reference."""
    root = tmp_path_factory.mktemp("report_runs")
    for name, args in (("reference", ["--steps", "6"]), ("bug", ["--steps", "3", "--bug", "no-zero-grad"])):
        collect_in_process(MLP, root / name, *args)
    assert traincheck("infer", root / "reference", "-o", root / "inv.json").returncode == 0
    proc = traincheck("check", root / "bug", "-i", root / "inv.json", "--out", root / "violations")
    assert proc.returncode == 1, proc.stderr
    return root / "violations"


def test_report_of_a_real_run(buggy_check, tmp_path):
    out = tmp_path / "report.html"
    proc = traincheck("report", buggy_check, "-o", out)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in (buggy_check / "violations-0.jsonl").read_text().splitlines()]
    records = [r for r in lines if r.get("event") != "coverage"]
    assert len(records) == len(lines) - 1  # and one stats record: the examples judged where it broke
    assert proc.stdout.startswith(f"{len(records)} violations in ")
    page = out.read_text()
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    _assert_self_contained(page)
    assert page.count("<svg") == 3  # per step, groups over steps, ranks over steps
    assert "<style>" in page
    cards = re.findall(r'<article class="card[^"]*" id="group-(\d+)"><h3>(.*?)</h3>', page)
    assert cards and cards[0][0] == "1"
    # Stale grads found by backward at step 1, on every parameter it judged there: one group.
    assert "backward found grads left over from an earlier step on 6 of 6 parameters of `model` at step 1" \
        in html.unescape(cards[0][1])
    assert '<p class="hint"><b>hint:</b> grads were not cleared before backward' in page
    assert "<dd>StateTransition backward</dd>" in page and len(cards) == 1
    # The missing zero_grad call seen by the call-order invariant: the same cause, in that card.
    assert '<div class="also"><b>Same cause:</b>' in page and "APISequence torch.optim.Optimizer.zero_grad;" in page
    assert '<b>1</b>rank (0)<' in page and "groups)" not in page
    assert "Evidence" in page and "&quot;support&quot;" in page
    assert 'aria-label="violations per step"' in page


def test_default_output_is_inside_the_directory(buggy_check, tmp_path):
    copy = tmp_path / "v"
    copy.mkdir()
    (copy / "violations-0.jsonl").write_bytes((buggy_check / "violations-0.jsonl").read_bytes())
    proc = traincheck("report", copy)
    assert proc.returncode == 0, proc.stderr
    assert (copy / "report.html").is_file() and str(copy / "report.html") in proc.stdout


def _write_hand_made(out: Path) -> None:
    """Two ranks: each breaks a state invariant on its own, and both report one cross-rank
    violation."""
    for rank in (0, 1):
        log = ViolationLog(out / f"node{rank}", rank, stream=io.StringIO())
        for step in range(rank, 6):
            violation = {"invariant": "st-0123456789ab", "relation": "StateTransition", "step": step,
                         "variable": f"model.blocks.{step % 2}.ln.weight",
                         "message": f"optimizer.step changes the data: <script>alert({step})</script> & more"}
            log.report(violation_record(violation, None, rank=rank, run_id="run-x", host="h"))
        shared = {"invariant": "cr-0123456789ab", "relation": "CrossRankConsistent", "step": 3,
                  "variable": "model.blocks.0.ln.weight", "ranks": [0, 1],
                  "message": "replicas differ at step 3"}
        log.report(violation_record(shared, None, rank=rank, run_id="run-x", host="h"))
        log.close()


def test_report_escapes_text_and_shows_every_rank(tmp_path):
    _write_hand_made(tmp_path / "v")
    out = tmp_path / "r.html"
    proc = traincheck("report", tmp_path / "v", "-o", out)
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    _assert_self_contained(page)
    assert "<script>" not in page and "alert(" in page
    assert "&lt;script&gt;alert(0)&lt;/script&gt; &amp; more" in page
    assert "rank 0" in page and "rank 1" in page
    # The cross-rank violation seen by both ranks at the same step counts once.
    assert proc.stdout.startswith("12 violations (13 records) in 2 groups from 2 files")
    assert "model.blocks.*.ln.weight" in page
    assert "<b>2</b>ranks (0-1)<" in page


def test_torn_last_line_is_skipped(tmp_path):
    _write_hand_made(tmp_path / "v")
    path = tmp_path / "v" / "node1" / "violations-1.jsonl"
    with path.open("a") as handle:
        handle.write('{"timestamp": "2026-')
    proc = traincheck("report", tmp_path / "v", "-o", tmp_path / "r.html")
    assert proc.returncode == 0, proc.stderr
    assert f"{path}:7: skipped a torn last line" in proc.stderr


def test_damaged_line_and_missing_directory_exit_2(tmp_path):
    _write_hand_made(tmp_path / "v")
    path = tmp_path / "v" / "node0" / "violations-0.jsonl"
    lines = path.read_text().splitlines()
    lines[2] = "garbage"
    path.write_text("\n".join(lines) + "\n")
    proc = traincheck("report", tmp_path / "v", "-o", tmp_path / "r.html")
    assert proc.returncode == 2 and proc.stderr.startswith(f"traincheck: error: {path}:3: not valid JSON")
    missing = traincheck("report", tmp_path / "nope")
    assert missing.returncode == 2 and str(tmp_path / "nope") in missing.stderr


def test_report_with_no_violations(tmp_path):
    (tmp_path / "clean").mkdir()
    proc = traincheck("report", tmp_path / "clean")
    assert proc.returncode == 0
    page = (tmp_path / "clean" / "report.html").read_text()
    assert "No violations recorded" in page
    _assert_self_contained(page)
