"""Violations reach the handlers of the ``traincheck`` logger (and, through propagation, the
root logger's), with the JSON record on the ``LogRecord``; with no handler anywhere nothing is
printed a second time; a handler that raises does not stop the training."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import MLP, agent_active, run_script

from traincheck_agent import messages
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import write_invariants
from traincheck_agent.report.log_bridge import LOGGER_NAME
from traincheck_agent.report.violations import ViolationLog, violation_record


class Collecting(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Raising(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.calls = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.calls += 1
        raise RuntimeError("the log server is down")


@pytest.fixture(scope="module")
def references(tmp_path_factory) -> Path:
    """Invariants of one clean MLP run, collected in this process."""
    root = tmp_path_factory.mktemp("log_bridge")
    with agent_active("collect", root / "ref"):
        run_script(MLP, "--steps", "8")
    invariants, files = infer_invariants([root / "ref"])
    path = root / "inv.json"
    write_invariants(invariants, path, [str(f) for f in files])
    return path


@pytest.fixture
def attached() -> Iterator:
    """Attach handlers to the ``traincheck`` logger for one test."""
    logger = logging.getLogger(LOGGER_NAME)
    added: list[logging.Handler] = []

    def attach(handler: logging.Handler) -> logging.Handler:
        logger.addHandler(handler)
        added.append(handler)
        return handler

    yield attach
    for handler in added:
        logger.removeHandler(handler)


@contextmanager
def no_root_handlers() -> Iterator[None]:
    """No handler on the root logger: pytest's own capture handlers, which it adds for the body
    of each test, are set aside for the ``with`` block."""
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers.clear()
    try:
        yield
    finally:
        root.handlers[:] = saved


def _check_a_forgotten_zero_grad(references: Path, out: Path) -> list[dict]:
    """Check the MLP that never zeroes its grads in this process; the violation records."""
    with agent_active("check", out, TRAINCHECK_INV=str(references)):
        run_script(MLP, "--steps", "4", "--bug", "no-zero-grad")
    lines = [json.loads(line) for line in (out / "violations-0.jsonl").read_text().splitlines()]
    return [r for r in lines if r.get("event") != "coverage"]


def _shown(written: list[dict], limit: int = 3) -> list[dict]:
    """The records the violations log shows: the first ``limit`` of each invariant."""
    seen: dict[str, int] = {}
    out = []
    for record in written:
        seen[record["invariant"]] = seen.get(record["invariant"], 0) + 1
        if seen[record["invariant"]] <= limit:
            out.append(record)
    return out


def test_a_handler_on_the_traincheck_logger_gets_the_shown_violations_with_their_records(references, attached,
                                                                                          tmp_path):
    handler = attached(Collecting())
    written = _check_a_forgotten_zero_grad(references, tmp_path / "check")
    shown = _shown(written)
    assert written and len(shown) < len(written)  # the run breaks one invariant more than 3 times
    got = handler.records
    assert len(got) == len(shown)  # what stderr shows, not a flood of every repeat
    assert {(r.levelno, r.name) for r in got} == {(logging.WARNING, LOGGER_NAME)}
    keys = [(r["invariant"], r["step"], r.get("variable")) for r in shown]
    assert sorted(keys, key=str) == sorted(((r.traincheck["invariant"], r.traincheck["step"],  # type: ignore[attr-defined]
                                             r.traincheck.get("variable")) for r in got), key=str)  # type: ignore[attr-defined]
    first = got[0]
    message = first.getMessage()
    assert message.startswith("violation at rank 0 step ") and "[traincheck]" not in message
    assert first.traincheck["invariant"] in message  # type: ignore[attr-defined]
    assert "\n" not in message


def test_without_a_handler_nothing_is_printed_twice(references, tmp_path, capsys):
    with no_root_handlers():
        assert not logging.getLogger(LOGGER_NAME).hasHandlers()
        written = _check_a_forgotten_zero_grad(references, tmp_path / "check")
    assert written
    err = capsys.readouterr().err.splitlines()
    mentions = [line for line in err if "violation at rank" in line]
    # Only the violations log's own lines (at most 3 per invariant), none from Python's
    # last-resort handler (which would print the message without the prefix).
    assert mentions and all(line.startswith("[traincheck] violation at rank") for line in mentions)
    per_invariant: dict[str, int] = {}
    for record in written:
        per_invariant[record["invariant"]] = per_invariant.get(record["invariant"], 0) + 1
    assert len(mentions) == sum(min(n, 3) for n in per_invariant.values())


def test_a_handler_that_raises_does_not_stop_the_training(references, attached, tmp_path, capsys):
    messages._seen.discard("log-bridge")  # said once per process: forget an earlier test's
    raising = attached(Raising())
    written = _check_a_forgotten_zero_grad(references, tmp_path / "check")  # returns: the run finished
    assert written and raising.calls == len(_shown(written))  # each shown violation tried
    err = capsys.readouterr().err
    assert err.count(f"a handler of the '{LOGGER_NAME}' logger failed on a violation (RuntimeError)") == 1
    assert "the log server is down" not in err and "Traceback" not in err


def _record(step: int) -> dict:
    return violation_record({"invariant": "st-000000000001", "relation": "StateTransition", "step": step,
                             "variable": "fc.\x1b[2Jweight", "message": "grad left stale"}, None, rank=0, run_id="r")


def test_a_root_handler_gets_violations_and_a_waived_one_is_info(tmp_path):
    """A script that configured the root logger (``basicConfig``) sees the violations there;
    a record marked waived is logged at INFO; control characters stay escaped."""
    seen = io.StringIO()
    root = logging.getLogger()
    handler = logging.StreamHandler(seen)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    saved_level = root.level
    with no_root_handlers():
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            log = ViolationLog(tmp_path, 0, stream=io.StringIO())
            log.report(_record(1))
            log.report({**_record(2), "waived": True})
            log.close()
        finally:
            root.setLevel(saved_level)
    lines = seen.getvalue().splitlines()
    assert [line.split()[:2] for line in lines] == [["WARNING", LOGGER_NAME], ["INFO", LOGGER_NAME]]
    assert "\x1b" not in seen.getvalue() and "fc.\\x1b[2Jweight" in lines[0]


def test_a_violation_log_without_any_handler_never_reaches_the_last_resort(tmp_path, capsys):
    with no_root_handlers():
        log = ViolationLog(tmp_path, 0, stream=io.StringIO())
        log.report(_record(1))
        log.close()
    assert capsys.readouterr().err == ""


def test_a_record_that_cannot_be_described_still_reaches_the_handlers(attached):
    from traincheck_agent.report.log_bridge import log_violation

    def undescribable(record: dict) -> str:
        raise KeyError("message")

    handler = attached(Collecting())
    log_violation({"invariant": "st-\x1b[31m1", "step": 3}, undescribable)
    [got] = handler.records
    assert got.getMessage() == "violation of st-\\x1b[31m1" and got.traincheck["step"] == 3  # type: ignore[attr-defined]
