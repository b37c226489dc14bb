"""Objects the program hands to instrumented calls run none of their code in the agent.

A module's forward may take a list, dict or str subclass, or any object, whose ``__len__``,
``__repr__``, ``__str__``, ``__bool__``, ``__iter__`` or even ``__class__`` raise an exception
that cannot be printed either. The agent describes them from their types alone, and whatever it
contains is reported as one line: the run ends as it does without the agent.
"""

from __future__ import annotations

import pytest
from conftest import PIPELINES, agent_env, run_parallel, run_python

from traincheck_agent.agent import runtime
from traincheck_agent.agent.record.descriptors import describe
from traincheck_agent.inference.engine import infer_invariants
from traincheck_agent.inference.invariant import write_invariants
from traincheck_agent.policy.model import DESCRIBE_SUMMARY as SUMMARY

HOSTILE = str(PIPELINES / "hostile_objects_train.py")


def _agent_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("[traincheck]")]


def _other_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("[traincheck]")]


@pytest.mark.slow
def test_hostile_arguments_leave_collect_and_check_runs_as_plain(tmp_path):
    ref = tmp_path / "ref"
    plain, collect = run_parallel(([HOSTILE], agent_env(None, None)), ([HOSTILE], agent_env("collect", ref)))
    assert plain.returncode == 0, plain.stderr
    assert (collect.returncode, collect.stdout) == (0, plain.stdout), collect.stderr
    assert not _other_lines(collect.stderr) and len(_agent_lines(collect.stderr)) <= 1, collect.stderr

    invariants, files = infer_invariants([ref])
    assert invariants
    inv = tmp_path / "inv.json"
    write_invariants(invariants, inv, [str(f) for f in files])
    check = run_python([HOSTILE], agent_env("check", tmp_path / "check", TRAINCHECK_INV=str(inv)))
    assert (check.returncode, check.stdout) == (0, plain.stdout), check.stderr
    assert not _other_lines(check.stderr), check.stderr
    assert not [line for line in _agent_lines(check.stderr) if "warning" in line], check.stderr


def _hostile_types():
    import importlib.util

    spec = importlib.util.spec_from_file_location("hostile_objects_train", HOSTILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_described_from_the_types_alone():
    hostile = _hostile_types()
    seen = {
        "list": describe(hostile.hostile(list)([1, "a"]), SUMMARY, {}, {}),
        "dict": describe(hostile.hostile(dict)(k=2.5), SUMMARY, {}, {}),
        "str": describe(hostile.hostile(str)("short"), SUMMARY, {}, {}),
        "object": describe(hostile.hostile(object)(), SUMMARY, {}, {}),
        "int": describe(hostile.hostile(int)(7), SUMMARY, {}, {}),
        "nested": describe(hostile.hostile(tuple)((hostile.hostile(list)([1]),)), SUMMARY, {}, {}),
    }
    assert seen == {
        "list": {"t": "HostileList", "len": 2, "items": [1, {"t": "str", "len": 1}]},
        "dict": {"t": "dict", "len": 1, "items": {"k": 2.5}},
        "str": "short",
        "object": {"t": "HostileObject"},
        "int": 7,
        "nested": {"t": "HostileTuple", "len": 1, "items": [{"t": "HostileList", "len": 1, "items": [1]}]},
    }


def test_an_exception_that_cannot_be_printed_is_one_warning_line(capsys):
    hostile = _hostile_types()
    runtime.report_agent_error("describe", hostile.Unprintable())
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["[traincheck] warning: agent error in describing call arguments (Unprintable: "
                     "<message could not be formatted>); the training continues (further errors in this "
                     "stage are counted, not shown)"]
