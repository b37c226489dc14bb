"""Names that reach a terminal: a layer name or run id with a newline or an escape sequence is
shown escaped in every line for a person (check mode's stderr and summary, ``traincheck check``,
``trace summary``, ``invariants show``), while the JSONL files keep it exactly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PIPELINES, agent_env

from traincheck_agent.terminal_text import visible

SCRIPT = str(PIPELINES / "hostile_names_train.py")
HOSTILE_NAME = "\n[traincheck] forged\x1b[31m"
HOSTILE_RUN_ID = "run\x1b]0;title\x07\nx"


def test_visible_escapes_what_a_terminal_would_obey():
    assert visible("model.fc1.weight \\n é") == "model.fc1.weight \\n é"
    assert visible(HOSTILE_NAME) == "\\n[traincheck] forged\\x1b[31m"
    assert visible("a\rb\tc\x7f\x9b\u202e\u2028\ud800\U000e0001") == \
        "a\\rb\\tc\\x7f\\x9b\\u202e\\u2028\\ud800\\U000e0001"
    assert visible(visible(HOSTILE_RUN_ID)) == visible(HOSTILE_RUN_ID)


def _run(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """Exit status and everything written to stdout and stderr, read as bytes so that a raw
    carriage return is not turned into a newline on the way."""
    proc = subprocess.run([sys.executable, *args], env=env, capture_output=True, timeout=240)
    return proc.returncode, (proc.stdout + proc.stderr).decode("utf-8", "surrogateescape")


def _assert_safe_for_a_terminal(output: str) -> None:
    lines = output.split("\n")
    assert [line for line in lines if not line.isprintable()] == []
    assert [line for line in lines if line.startswith("[traincheck] forged")] == []


def _variables(violations_file: Path) -> set[str]:
    return {json.loads(line).get("variable") for line in violations_file.read_text().splitlines()}


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> dict[str, object]:
    """A clean reference, its invariants, and a check run of the buggy script under a hostile
    run id that also writes its trace."""
    root = tmp_path_factory.mktemp("hostile")
    status, output = _run([SCRIPT], agent_env("collect", root / "ref"))
    assert status == 0, output
    inv = root / "inv.json"
    status, output = _run(["-m", "traincheck_agent", "infer", str(root / "ref"), "-o", str(inv)])
    assert status == 0, output
    status, output = _run([SCRIPT, "--bug", "no-zero-grad"],
                          agent_env("check", root / "check", TRAINCHECK_INV=str(inv), TRAINCHECK_CHECK_TRACE="1",
                                    TRAINCHECK_RUN_ID=HOSTILE_RUN_ID))
    assert status == 0, output
    return {"root": root, "inv": inv, "check_output": output}


@pytest.mark.slow
def test_check_mode_shows_hostile_names_escaped(hostile_run):
    output = str(hostile_run["check_output"])
    _assert_safe_for_a_terminal(output)
    assert "model.\\n[traincheck] forged\\x1b[31m.weight" in output  # the parameter, escaped
    assert "[traincheck] check summary (rank 0): " in output
    log = Path(hostile_run["root"]) / "check" / "violations-0.jsonl"
    assert f"model.{HOSTILE_NAME}.weight" in _variables(log)  # the file keeps the exact name
    assert {json.loads(line)["run_id"] for line in log.read_text().splitlines()} == {HOSTILE_RUN_ID}


@pytest.mark.slow
def test_cli_shows_hostile_names_escaped(hostile_run):
    root = Path(hostile_run["root"])
    status, output = _run(["-m", "traincheck_agent", "check", str(root / "check"), "-i", str(hostile_run["inv"]),
                           "--out", str(root / "offline")])
    assert status == 1, output
    _assert_safe_for_a_terminal(output)
    assert "model.\\n[traincheck] forged\\x1b[31m.bias" in output
    assert f"model.{HOSTILE_NAME}.bias" in _variables(root / "offline" / "violations-0.jsonl")

    status, output = _run(["-m", "traincheck_agent", "trace", "summary", str(root / "check")])
    assert status == 0, output
    _assert_safe_for_a_terminal(output)
    assert visible(HOSTILE_RUN_ID) in output and visible(f"model.{HOSTILE_NAME}.weight") in output

    doc = json.loads(Path(hostile_run["inv"]).read_text())
    doc["invariants"][0]["description"] += HOSTILE_NAME
    edited = root / "edited.json"
    edited.write_text(json.dumps(doc))
    status, output = _run(["-m", "traincheck_agent", "invariants", "show", str(edited)])
    assert status == 0, output
    _assert_safe_for_a_terminal(output)
    assert visible(HOSTILE_NAME) in output
