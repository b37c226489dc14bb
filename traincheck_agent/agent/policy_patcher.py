"""Apply a policy's API rules to a module when it is imported (wrapt post-import hooks).

A rule names its module; when that module finishes importing (or at once, if it already has),
its functions and class methods that match the rule are wrapped in place. Classes are patched
on the class object, so every alias of the class sees the wrapper; plain functions are patched
on the module the rule names, which is where the framework looks them up (``F.dropout``).
"""

from __future__ import annotations

import fnmatch
import inspect
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from traincheck_agent.agent import runtime
from traincheck_agent.agent.patching import is_traced, wrap_attribute
from traincheck_agent.agent.patching import on_import as on_import_of
from traincheck_agent.messages import warn
from traincheck_agent.policy.model import ApiRule, Policy, glob_matcher

_GLOB_CHARS = set("*?[")

_METHOD_TYPES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    staticmethod,
    classmethod,
)


def _is_function(obj: Any) -> bool:
    return isinstance(obj, (types.FunctionType, types.BuiltinFunctionType)) or (
        callable(obj) and not inspect.isclass(obj) and not inspect.ismodule(obj) and hasattr(obj, "__name__")
        and type(obj).__name__ in ("builtin_function_or_method", "function", "_lru_cache_wrapper")
    )


def _is_method(member: Any) -> bool:
    return isinstance(member, _METHOD_TYPES) or is_traced(member)


def candidates(module: types.ModuleType, rule: ApiRule) -> Iterator[tuple[str, Any, str]]:
    """Yield (relative name, owner, attribute) for every target of ``rule`` in ``module``."""
    if not any(_GLOB_CHARS & set(pattern) for pattern in rule.include):
        yield from _named_candidates(module, rule)
        return
    namespace = vars(module)
    class_matches = glob_matcher(tuple(sorted({p.split(".", 1)[0] for p in rule.include if "." in p})))
    for name, obj in list(namespace.items()):
        if inspect.isclass(obj):
            if not class_matches(name):
                continue
            for attr, member in list(vars(obj).items()):
                if _is_method(member):
                    yield f"{name}.{attr}", obj, attr
            for pattern in rule.include:  # exact methods inherited from a base class
                cls_pat, _, meth = pattern.partition(".")
                if meth and not (_GLOB_CHARS & set(meth)) and fnmatch.fnmatchcase(name, cls_pat) \
                        and meth not in vars(obj) and callable(getattr(obj, meth, None)):
                    yield f"{name}.{meth}", obj, meth
        elif _is_function(obj):
            yield name, module, name


def _named_candidates(module: types.ModuleType, rule: ApiRule) -> Iterator[tuple[str, Any, str]]:
    """``candidates`` of a rule that names every target exactly (most default rules, and every
    rule of check mode's reduced policies): each is looked up by name instead of scanning the
    module, whose namespace can hold thousands of names (``torch``'s does)."""
    namespace = vars(module)
    for pattern in dict.fromkeys(rule.include):
        name, _, attr = pattern.partition(".")
        obj = namespace.get(name)
        if not attr:
            if _is_function(obj):
                yield name, module, name
        elif inspect.isclass(obj) and "." not in attr:
            member = vars(obj).get(attr)
            if member is not None:
                if _is_method(member):
                    yield pattern, obj, attr
            elif callable(getattr(obj, attr, None)):  # inherited from a base class
                yield pattern, obj, attr


def apply_rules(module: types.ModuleType, rules: list[ApiRule], policy: Policy) -> int:
    """Wrap what ``rules`` select in ``module``; return how many attributes were wrapped."""
    from traincheck_agent.agent.record.call_recorder import make_call_wrapper  # needs torch

    wrapped = 0
    with warnings.catch_warnings():
        # Touching deprecated module attributes while enumerating must not warn the user.
        warnings.simplefilter("ignore")
        for rule in rules:
            wrapped += _apply_rule(module, rule, policy, make_call_wrapper)
    return wrapped


def _apply_rule(
    module: types.ModuleType,
    rule: ApiRule,
    policy: Policy,
    make_call_wrapper: Callable[..., Any],
) -> int:
    wrapped = 0
    matched: set[str] = set()
    for rel_name, owner, attr in candidates(module, rule):
        if not rule.matches(rel_name):
            continue
        matched.add(rel_name)
        full_name = f"{module.__name__}.{rel_name}"
        if policy.api_excluded(full_name):
            continue
        try:
            target = vars(owner).get(attr) if inspect.isclass(owner) else None
            if target is None:
                target = getattr(owner, attr)
            if is_traced(target):
                continue
            func = target.__func__ if isinstance(target, (staticmethod, classmethod)) else target
            wrapper = make_call_wrapper(
                full_name,
                args_level=rule.args,
                returns_level=rule.returns,
                func_for_names=func,
                is_method=inspect.isclass(owner) and not isinstance(target, staticmethod),
                describe_self=attr != "__init__",  # the object is not built yet
            )
            if wrap_attribute(owner, attr, wrapper):
                wrapped += 1
        except Exception as exc:  # one API that cannot be wrapped must not stop the others
            # Not counted against the budget: an API left unwrapped costs nothing but its records.
            runtime.report_agent_error("wrap", exc, where=f"policy {rule.source}: apis[{rule.id}]: {full_name}",
                                       counted=False)
    for pattern in rule.include:
        if not (_GLOB_CHARS & set(pattern)) and pattern not in matched:
            warn(f"policy {rule.source}: apis[{rule.id}]: {module.__name__}.{pattern} does not exist; skipped")
    return wrapped


def install_policy_hooks(policy: Policy, schedule: Callable[[Callable[[], None]], None]) -> None:
    """Register one post-import hook per module named by the policy; ``schedule`` runs the
    patching once the agent is active (modules imported during ``import torch`` wait)."""
    for module_name in policy.watched_modules:
        rules = policy.rules_for_module(module_name)

        def on_import(module: types.ModuleType, rules: list[ApiRule] = rules) -> None:
            def patch() -> None:
                if runtime.current is None:
                    return
                try:
                    apply_rules(module, rules, policy)
                except Exception as exc:
                    runtime.report_agent_error("wrap", exc, where=f"policy rules for {module.__name__}", counted=False)

            schedule(patch)

        on_import_of(module_name, on_import)
