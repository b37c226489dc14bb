"""The in-memory form of a policy (the YAML format is documented in docs/policies.md)."""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

# What can be recorded about arguments and return values.
DESCRIBE_NONE = "none"
DESCRIBE_SUMMARY = "summary"  # type, shape, dtype, device, scalars
DESCRIBE_FINGERPRINT = "fingerprint"  # summary + a fingerprint of every tensor
DESCRIBE_LEVELS = (DESCRIBE_NONE, DESCRIBE_SUMMARY, DESCRIBE_FINGERPRINT)

# Points of training at which state can be snapshotted: "<before|after>:<event>".
STATE_EVENTS = ("optimizer.step", "zero_grad", "backward", "module.train")
STATE_WHEN = ("before", "after")
STATE_POINTS = tuple(f"{w}:{e}" for e in STATE_EVENTS for w in STATE_WHEN)

# What a state rule can capture.
STATE_ITEMS = (
    "params.data",  # fingerprint of each parameter's data
    "params.grad",  # fingerprint of each parameter's grad (None recorded as such)
    "optimizer.state",  # fingerprints of optimizer state tensors (exp_avg, momentum, ...)
    "optimizer.hyperparams",  # scalar hyper-parameters of each param group (lr, momentum, ...)
    # and the optimizer object's attributes that the policy names (``optimizer_attributes``)
    "module.mode",  # the training flag of every submodule
    "buffers",  # fingerprints of module buffers (BatchNorm running statistics, ...)
)


_GLOB_CHARS = frozenset("*?[")


@functools.lru_cache(maxsize=1024)
def glob_matcher(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """Whether a name matches any of the shell-style ``patterns`` (case-sensitive): plain names
    by set membership, the globs as one compiled regex (patching tests every function and
    method of a module against them). Most rules list plain names, and compiling a regex for
    them would be most of what loading a policy costs at start-up."""
    literal = frozenset(p for p in patterns if _GLOB_CHARS.isdisjoint(p))
    globs = [p for p in patterns if p not in literal]
    if not globs:
        return literal.__contains__
    regex = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in globs))
    return lambda name: name in literal or regex.match(name) is not None


class ApiRule(NamedTuple):
    """Wrap the functions / methods of ``module`` whose names match ``include`` and not ``exclude``.

    Names are ``func`` or ``Class.method`` relative to ``module``. A glob in the method part
    matches only methods a class defines itself (inherited ones are wrapped where defined);
    an exact ``Class.method`` is resolved through inheritance and wrapped on ``Class``.
    """

    id: str
    module: str
    include: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    args: str = DESCRIBE_SUMMARY
    returns: str = DESCRIBE_SUMMARY
    source: str = ""

    def matches(self, name: str) -> bool:
        return glob_matcher(self.include)(name) and not glob_matcher(self.exclude)(name)


class StateRule(NamedTuple):
    at: str  # one of STATE_POINTS
    items: tuple[str, ...]
    source: str = ""

    @property
    def when(self) -> str:
        return self.at.split(":", 1)[0]

    @property
    def event(self) -> str:
        return self.at.split(":", 1)[1]


class Sampling(NamedTuple):
    """Snapshot state at every step below ``warmup_steps``, then every ``every`` steps."""

    warmup_steps: int = 10
    every: int = 1

    def wants(self, step: int) -> bool:
        if step < self.warmup_steps:
            return True
        return (step - self.warmup_steps) % self.every == 0


@dataclass
class Policy:
    """The merged result of all loaded policy files."""

    apis: dict[str, ApiRule] = field(default_factory=dict)
    state: dict[str, StateRule] = field(default_factory=dict)
    sampling: Sampling = field(default_factory=Sampling)
    param_attributes: tuple[str, ...] = ()
    optimizer_attributes: tuple[str, ...] = ()
    exclude_apis: tuple[str, ...] = ()
    record_module_calls: bool = True
    sources: tuple[str, ...] = ()
    digest: str = ""

    def rules_for_module(self, module_name: str) -> list[ApiRule]:
        return [r for r in self.apis.values() if r.module == module_name]

    def api_excluded(self, full_name: str) -> bool:
        return glob_matcher(self.exclude_apis)(full_name)

    def state_rule(self, when: str, event: str) -> StateRule | None:
        return self.state.get(f"{when}:{event}")

    @property
    def watched_modules(self) -> tuple[str, ...]:
        return tuple(sorted({r.module for r in self.apis.values()}))
