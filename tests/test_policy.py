"""Policy files: validation messages, merging and overrides, and their effect on a real run."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import PIPELINES, agent_env, read_traces, run_python

from traincheck_agent.policy import load_policies
from traincheck_agent.policy.loader import default_policy_files


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_default_policies_load_cleanly():
    files = default_policy_files()
    assert {f.name for f in files} >= {"torch.yaml", "deepspeed.yaml", "accelerate.yaml"}
    policy, problems = load_policies(files)
    assert problems == []
    assert "torch.nn.functional" in policy.watched_modules
    assert policy.state_rule("after", "optimizer.step").items == (
        "params.data", "params.grad", "optimizer.hyperparams", "buffers")


def test_every_problem_is_reported_with_file_and_key(tmp_path):
    bad = _write(tmp_path, "bad.yaml", """
version: 1
colour: blue
apis:
  - module: torch.nn.functional
    include: [dropout]
    args: everything
    speed: fast
  - include: [relu]
  - module: torch.optim
    include: 7
state:
  - at: sometime:step
    items: [params.data]
  - at: after:backward
    items: [params.grad, params.colour]
sampling:
  every: 0
  warmup_steps: 3
record_module_calls: maybe
""")
    policy, problems = load_policies([bad])
    text = [str(p) for p in problems]
    assert all(t.startswith(f"policy {bad}: ") for t in text)
    keys = [p.key for p in problems]
    assert keys == ["colour", "apis[0].speed", "apis[0].args", "apis[1].module", "apis[2].include",
                    "state[0].at", "state[1].items", "sampling.every", "record_module_calls"]
    # The valid parts still apply.
    rule = policy.apis["torch.nn.functional:dropout"]
    assert rule.args == "summary" and rule.include == ("dropout",)
    assert policy.state_rule("after", "backward").items == ("params.grad",)
    assert policy.sampling.warmup_steps == 3 and policy.sampling.every == 1


def test_unreadable_and_malformed_files(tmp_path):
    not_yaml = _write(tmp_path, "broken.yaml", "apis: [unclosed\n")
    a_list = _write(tmp_path, "list.yaml", "- 1\n- 2\n")
    future = _write(tmp_path, "future.yaml", "version: 9\n")
    missing = tmp_path / "missing.yaml"
    _, problems = load_policies([not_yaml, a_list, future, missing])
    text = "\n".join(str(p) for p in problems)
    assert f"policy {not_yaml}: not valid YAML" in text
    assert f"policy {a_list}: expected a mapping at the top level, got list" in text
    assert f"policy {future}: version: unsupported version 9" in text
    assert f"policy {missing}: cannot be read" in text


def test_later_files_override_earlier_ones(tmp_path):
    first = _write(tmp_path, "a.yaml", """
apis:
  - {id: fn, module: torch.nn.functional, include: [dropout, relu]}
state:
  - {at: after:backward, items: [params.grad]}
sampling: {warmup_steps: 5, every: 2}
""")
    second = _write(tmp_path, "b.yaml", """
apis:
  - {id: fn, module: torch.nn.functional, include: [softmax]}
  - {id: gone, module: torch.nn.init, include: [normal_]}
  - {id: gone, module: torch.nn.init, enabled: false}
state:
  - {at: after:backward, items: []}
sampling: {every: 4}
""")
    policy, problems = load_policies([first, second])
    assert problems == []
    assert policy.apis["fn"].include == ("softmax",) and "gone" not in policy.apis
    assert policy.state_rule("after", "backward") is None
    assert (policy.sampling.warmup_steps, policy.sampling.every) == (5, 4)
    assert [policy.sampling.wants(s) for s in range(4, 10)] == [True, True, False, False, False, True]


def test_attribute_lists_add_up_across_files(tmp_path):
    """``param_attributes`` and ``optimizer_attributes`` of later files add to the earlier ones
    (each name once, one name may stand alone); a value of another type is reported and the
    rest still applies."""
    first = _write(tmp_path, "a.yaml", "param_attributes: [shared]\noptimizer_attributes: [clip_grad]\n")
    second = _write(tmp_path, "b.yaml", "optimizer_attributes: [clip_grad, overlap_comm]\n")
    bad = _write(tmp_path, "c.yaml", "optimizer_attributes: 7\nparam_attributes: ds_id\n")
    policy, problems = load_policies([first, second, bad])
    assert policy.optimizer_attributes == ("clip_grad", "overlap_comm")
    assert policy.param_attributes == ("shared", "ds_id")
    assert [(p.key, str(p).startswith(f"policy {bad}: ")) for p in problems] == [("optimizer_attributes", True)]


@pytest.mark.slow
def test_user_policy_changes_what_a_run_records(tmp_path):
    extra = _write(tmp_path, "mine.yaml", """
record_module_calls: false
exclude_apis: ["torch.nn.functional.cross_entropy"]
apis:
  - {id: mine, module: torch.nn.functional, include: [relu, no_such_function]}
state:
  - {at: before:backward, items: []}
""")
    out = tmp_path / "t"
    proc = run_python([str(PIPELINES / "mlp_train.py"), "--steps", "2"],
                      agent_env("collect", out, TRAINCHECK_POLICY=str(extra)))
    assert proc.returncode == 0, proc.stderr
    assert f"policy {extra}: apis[mine]: torch.nn.functional.no_such_function does not exist; skipped" in proc.stderr
    trace = read_traces(out)[0]
    apis = {c["api"] for c in trace.calls()}
    assert "__main__.MLP.forward" not in apis and "torch.nn.functional.cross_entropy" not in apis
    assert "torch.optim.Adam.step" in apis
    assert not trace.states("before:backward") and trace.states("after:backward")


@pytest.mark.slow
def test_broken_policy_file_does_not_stop_training(tmp_path):
    broken = _write(tmp_path, "broken.yaml", "apis: [unclosed\n")
    out = tmp_path / "t"
    proc = run_python([str(PIPELINES / "mlp_train.py"), "--steps", "2"],
                      agent_env("collect", out, TRAINCHECK_POLICY=str(broken)))
    assert proc.returncode == 0
    assert proc.stderr.count("[traincheck]") == 1 and f"policy {broken}: not valid YAML" in proc.stderr
    assert read_traces(out)[0].calls("torch.optim.Adam.step")


def test_rule_names_match_as_shell_globs():
    from traincheck_agent.policy.model import glob_matcher

    mixed = glob_matcher(("Adam.step", "*.zero_grad", "Linear.forward", "conv[12]d"))
    assert [mixed(n) for n in ("Adam.step", "SGD.zero_grad", "Linear.forward", "conv2d", "conv3d")] == [
        True, True, True, True, False]
    assert not mixed("Adam.step_") and not mixed("xAdam.step") and not mixed("Linear")
    plain = glob_matcher(("dropout", "Tensor.normal_"))
    assert plain("dropout") and plain("Tensor.normal_") and not plain("dropout2d") and not plain("Tensor")
    assert not glob_matcher(())("anything")


def test_exactly_named_targets_are_found_without_scanning_the_module():
    """A rule that names every target exactly (check mode's reduced policies) is resolved by
    name lookups; it must find what a scan of the whole module finds for the same names, for
    functions, a class's own methods and inherited ones, and nothing for names that are absent."""
    import torch
    import torch.nn.functional

    from traincheck_agent.agent import policy_patcher
    from traincheck_agent.policy.model import ApiRule

    cases = [
        (torch, ("Tensor.normal_", "Tensor.zero_", "Tensor.no_such_method", "no_such_function")),
        (torch.nn, ("Module.eval", "Linear.forward", "Linear.train", "Linear.in_features", "Module.T_destination")),
        (torch.nn.functional, ("dropout", "batch_norm", "Tensor", "F.dropout")),
    ]
    for module, names in cases:
        rule = ApiRule(id="t", module=module.__name__, include=names)
        named = sorted((n, id(o), a) for n, o, a in policy_patcher.candidates(module, rule))
        # The same rule with one glob that matches nothing takes the scanning path.
        scanning = rule._replace(include=(*names, "no_such_*"))
        scanned = sorted((n, id(o), a) for n, o, a in policy_patcher.candidates(module, scanning) if rule.matches(n))
        assert named == scanned, module.__name__
    found = {n for n, _, _ in policy_patcher.candidates(torch.nn, ApiRule("t", "torch.nn", cases[1][1]))}
    assert found == {"Module.eval", "Linear.forward", "Linear.train"}
