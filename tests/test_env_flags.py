"""Yes/no environment variables: one reading everywhere, and a warning, not a guess, for a value
that is neither."""

from __future__ import annotations

import pytest

from traincheck_agent import messages
from traincheck_agent.settings import Settings

YES = ["1", "true", "YES", " on "]
NO = ["0", "false", "No", " OFF", ""]


def _settings(**env: str) -> Settings:
    return Settings.from_env({"TRAINCHECK_MODE": "check", **env})


@pytest.mark.parametrize("value", YES + NO)
def test_no_default_policies_reads_yes_and_no(value, capsys):
    settings = _settings(TRAINCHECK_NO_DEFAULT_POLICIES=value, TRAINCHECK_CHECK_TRACE=value)
    assert settings.use_default_policies is (value not in YES)
    assert settings.check_trace is (value in YES)
    assert capsys.readouterr().err == ""


def test_a_value_that_is_neither_warns_once_and_keeps_the_default(capsys):
    for _ in range(2):
        assert _settings(TRAINCHECK_NO_DEFAULT_POLICIES="sometimes\x1b[2J").use_default_policies
    assert capsys.readouterr().err.splitlines() == [
        "[traincheck] warning: TRAINCHECK_NO_DEFAULT_POLICIES='sometimes\\x1b[2J' is not one of "
        "1, true, yes, on, 0, false, no, off; using 0"]


@pytest.mark.parametrize(("value", "shown"), [("on", True), ("off", False), ("maybe-not", False)])
def test_debug_lines_follow_the_same_reading(value, shown, monkeypatch, capsys):
    monkeypatch.setenv("TRAINCHECK_DEBUG", value)
    messages.debug("first")
    messages.debug("second")
    err = capsys.readouterr().err.splitlines()
    debug_lines = [line for line in err if line.startswith("[traincheck] debug: ")]
    assert len(debug_lines) == (2 if shown else 0)
    warnings = [line for line in err if line.startswith("[traincheck] warning: ")]
    assert warnings == ([] if value != "maybe-not" else [
        "[traincheck] warning: TRAINCHECK_DEBUG='maybe-not' is not one of 1, true, yes, on, 0, false, no, off; "
        "using 0"])
