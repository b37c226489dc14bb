"""Load, validate and merge policy YAML files.

Validation never stops at the first problem and never drops the whole file: each problem is
reported with the file and the key it concerns, the offending entry is skipped, and the rest of
the policy still applies. Files are parsed with the safe loader of PyYAML (data only), with
anchors and aliases refused (a policy never needs them, and they are how a small file expands
into a huge value) and duplicate keys refused (which one was meant is unknowable).
"""

from __future__ import annotations

import hashlib
import reprlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from traincheck_agent.input_files import read_limited
from traincheck_agent.policy.model import (
    DESCRIBE_LEVELS,
    STATE_ITEMS,
    STATE_POINTS,
    ApiRule,
    Policy,
    Sampling,
    StateRule,
)
from traincheck_agent.policy.parse_cache import parse_cached

MAX_POLICY_BYTES = 1 << 20
SUPPORTED_VERSION = 1

TOP_LEVEL_KEYS = {
    "version": "policy format version (1)",
    "name": "a label for the policy",
    "description": "free text",
    "apis": "list of API rules",
    "exclude_apis": "list of full API names (globs) never to wrap",
    "state": "list of state rules",
    "sampling": "mapping: warmup_steps, every",
    "param_attributes": "list of parameter attribute names to record",
    "optimizer_attributes": "list of optimizer attribute names to record with optimizer.hyperparams",
    "record_module_calls": "record nn.Module calls as API events (true/false)",
}
API_RULE_KEYS = {"id", "module", "include", "exclude", "args", "returns", "enabled"}
STATE_RULE_KEYS = {"at", "items"}
SAMPLING_KEYS = {"warmup_steps", "every"}


class PolicyError(ValueError):
    """A problem in one policy file; ``str()`` names the file and the key."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source, self.key, self.problem = source, key, problem
        super().__init__(f"policy {source}: {key}: {problem}" if key else f"policy {source}: {problem}")


def default_policy_dir() -> Path:
    """Installed wheels carry the policies inside the package; a source checkout has them at
    the top of the repository."""
    package_dir = Path(__file__).resolve().parent.parent
    installed = package_dir / "_policies"
    return installed if installed.is_dir() else package_dir.parent / "policies"


_SHOW = reprlib.Repr()
_SHOW.maxlevel, _SHOW.maxstring, _SHOW.maxother, _SHOW.maxlist, _SHOW.maxdict = 2, 80, 80, 4, 4


def _show(value: Any) -> str:
    """A short repr for messages, however large or deep the value."""
    return _SHOW.repr(value)


def default_policy_files() -> list[Path]:
    return sorted(default_policy_dir().glob("*.yaml"))


def _union(held: tuple[str, ...], extra: tuple[str, ...]) -> tuple[str, ...]:
    return held + tuple(name for name in extra if name not in held)


def _str_list(value: Any, source: str, key: str, problems: list[PolicyError]) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    problems.append(PolicyError(source, key, f"expected a string or a list of strings, got {_show(value)}"))
    return ()


def _read_limited(path: Path) -> bytes:
    try:
        return read_limited(path, MAX_POLICY_BYTES)
    except ValueError as exc:
        raise PolicyError(str(path), "", str(exc)) from None


def _parse(data: bytes) -> Any:
    from traincheck_agent.policy.yaml_parse import parse_policy_text  # PyYAML: only when parsing

    return parse_policy_text(data.decode("utf-8"))


def _read_yaml(path: Path, cache_dir: Path | None = None) -> tuple[Any, bytes]:
    """The parsed document and the raw bytes (for the policy digest); parsed documents are
    kept under ``cache_dir`` (``parse_cache``; None: parse every time)."""
    data = _read_limited(path)
    try:
        return parse_cached(data, _parse, cache_dir), data
    except ValueError as exc:  # UnicodeDecodeError is one too
        if isinstance(exc, UnicodeDecodeError):
            raise PolicyError(str(path), "", f"not UTF-8 text: {exc}") from None
        raise PolicyError(str(path), "", str(exc)) from None


def _is_mapping_with_known_keys(
    raw: Any, key: str, known: set[str], source: str, problems: list[PolicyError]
) -> bool:
    """False (with a problem) unless ``raw`` is a mapping; each unknown key is a problem too."""
    if not isinstance(raw, dict):
        problems.append(PolicyError(source, key, f"expected a mapping, got {type(raw).__name__}"))
        return False
    for unknown in sorted(set(raw) - known, key=str):
        problems.append(PolicyError(source, f"{key}.{unknown}", f"unknown key (known: {', '.join(sorted(known))})"))
    return True


def _apply_api_rule(policy: Policy, raw: Any, index: int, source: str, problems: list[PolicyError]) -> None:
    key = f"apis[{index}]"
    if not _is_mapping_with_known_keys(raw, key, API_RULE_KEYS, source, problems):
        return
    module = raw.get("module")
    if not isinstance(module, str) or not module:
        problems.append(PolicyError(source, f"{key}.module", "required: the module whose import applies the rule"))
        return
    include = _str_list(raw.get("include", ["*"]), source, f"{key}.include", problems)
    exclude = _str_list(raw.get("exclude", []), source, f"{key}.exclude", problems)
    rule_id = raw.get("id", f"{module}:{','.join(include)}")
    if not isinstance(rule_id, str):
        problems.append(PolicyError(source, f"{key}.id", f"expected a string, got {_show(rule_id)}"))
        return
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        problems.append(PolicyError(source, f"{key}.enabled", f"expected true or false, got {_show(enabled)}"))
        return
    if not enabled:
        policy.apis.pop(rule_id, None)
        return
    levels = {}
    for name in ("args", "returns"):
        level = raw.get(name, "summary")
        if level not in DESCRIBE_LEVELS:
            problems.append(PolicyError(source, f"{key}.{name}", f"expected one of {', '.join(DESCRIBE_LEVELS)}, got {_show(level)}"))
            level = "summary"
        levels[name] = level
    if not include:
        return
    policy.apis[rule_id] = ApiRule(rule_id, module, include, exclude, levels["args"], levels["returns"], source)


def _apply_state_rule(policy: Policy, raw: Any, index: int, source: str, problems: list[PolicyError]) -> None:
    key = f"state[{index}]"
    if not _is_mapping_with_known_keys(raw, key, STATE_RULE_KEYS, source, problems):
        return
    at = raw.get("at")
    if at not in STATE_POINTS:
        problems.append(PolicyError(source, f"{key}.at", f"expected one of {', '.join(STATE_POINTS)}, got {_show(at)}"))
        return
    items = _str_list(raw.get("items", []), source, f"{key}.items", problems)
    bad = [i for i in items if i not in STATE_ITEMS]
    for item in bad:
        problems.append(PolicyError(source, f"{key}.items", f"unknown item {_show(item)} (known: {', '.join(STATE_ITEMS)})"))
    items = tuple(i for i in items if i not in bad)
    if items:
        policy.state[at] = StateRule(at, items, source)
    else:
        policy.state.pop(at, None)


def _apply_sampling(policy: Policy, raw: Any, source: str, problems: list[PolicyError]) -> None:
    if not _is_mapping_with_known_keys(raw, "sampling", SAMPLING_KEYS, source, problems):
        return
    values = {"warmup_steps": policy.sampling.warmup_steps, "every": policy.sampling.every}
    for name, value in raw.items():
        if name not in SAMPLING_KEYS:
            continue
        minimum = 1 if name == "every" else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            problems.append(PolicyError(source, f"sampling.{name}", f"expected an integer >= {minimum}, got {_show(value)}"))
            continue
        values[name] = value
    policy.sampling = Sampling(**values)


def apply_policy_document(policy: Policy, doc: Any, source: str) -> list[PolicyError]:
    """Merge one parsed document into ``policy``; return the problems found (all of them)."""
    problems: list[PolicyError] = []
    if doc is None:
        return problems
    if not isinstance(doc, dict):
        return [PolicyError(source, "", f"expected a mapping at the top level, got {type(doc).__name__}")]
    for unknown in sorted(set(doc) - set(TOP_LEVEL_KEYS), key=str):
        problems.append(PolicyError(source, _show(unknown) if not isinstance(unknown, str) else unknown, f"unknown key (known: {', '.join(TOP_LEVEL_KEYS)})"))
    version = doc.get("version", SUPPORTED_VERSION)
    if version != SUPPORTED_VERSION:
        return problems + [PolicyError(source, "version", f"unsupported version {_show(version)} (this agent reads {SUPPORTED_VERSION})")]
    apis = doc.get("apis", [])
    if not isinstance(apis, list):
        problems.append(PolicyError(source, "apis", "expected a list of rules"))
    else:
        for i, raw in enumerate(apis):
            _apply_api_rule(policy, raw, i, source, problems)
    state = doc.get("state", [])
    if not isinstance(state, list):
        problems.append(PolicyError(source, "state", "expected a list of rules"))
    else:
        for i, raw in enumerate(state):
            _apply_state_rule(policy, raw, i, source, problems)
    if "sampling" in doc:
        _apply_sampling(policy, doc["sampling"], source, problems)
    if "exclude_apis" in doc:
        policy.exclude_apis += _str_list(doc["exclude_apis"], source, "exclude_apis", problems)
    if "param_attributes" in doc:
        policy.param_attributes = _union(policy.param_attributes,
                                         _str_list(doc["param_attributes"], source, "param_attributes", problems))
    if "optimizer_attributes" in doc:
        policy.optimizer_attributes = _union(
            policy.optimizer_attributes, _str_list(doc["optimizer_attributes"], source, "optimizer_attributes", problems))
    if "record_module_calls" in doc:
        value = doc["record_module_calls"]
        if isinstance(value, bool):
            policy.record_module_calls = value
        else:
            problems.append(PolicyError(source, "record_module_calls", f"expected true or false, got {_show(value)}"))
    return problems


def _apply_guarded(policy: Policy, doc: Any, source: str) -> list[PolicyError]:
    """``apply_policy_document``; should a document still break it, only that file is lost
    (the rules it added before the failure stay, as for any other problem in it)."""
    try:
        return apply_policy_document(policy, doc, source)
    except Exception as exc:
        return [PolicyError(source, "", f"cannot be applied ({type(exc).__name__}: {str(exc)[:200]})")]


def load_policies(
    files: Iterable[Path], report: Callable[[PolicyError], None] | None = None, cache_dir: Path | None = None
) -> tuple[Policy, list[PolicyError]]:
    """Merge ``files`` in order. Every problem goes to ``report`` (if given) and is returned.
    ``cache_dir``: where parsed documents are kept between processes (``parse_cache``)."""
    policy = Policy()
    problems: list[PolicyError] = []
    digest = hashlib.sha256()
    sources: list[str] = []
    for path in files:
        path = Path(path)
        source = str(path)
        try:
            doc, data = _read_yaml(path, cache_dir)
        except PolicyError as exc:
            found = [exc]
        except OSError as exc:
            found = [PolicyError(source, "", f"cannot be read: {exc.strerror or exc}")]
        else:
            digest.update(data)
            sources.append(source)
            found = _apply_guarded(policy, doc, source)
        for problem in found:
            problems.append(problem)
            if report is not None:
                report(problem)
    policy.sources = tuple(sources)
    policy.digest = digest.hexdigest()[:16]
    return policy, problems
