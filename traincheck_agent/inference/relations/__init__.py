"""Relation templates, one module each, and each module the one home of its relation's facts.

``MODULES`` names each relation's module, in the order relations are inferred and checked: it is
the only list of relations; adding one is its module plus one line here. ``load`` and ``module``
import only the modules asked for, so that a checker pays for the relations its invariants use
and nothing else (importing all of them costs about 10 ms).

What a relation module provides is ``Relation`` below; the streaming part of it (collectors,
examples, judging) is described in ``inference.stream``.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Hashable, Iterable
from types import ModuleType
from typing import Any, Protocol

MODULES = {
    "StateTransition": "state_transition",
    "CrossRankConsistent": "cross_rank",
    "ConsistentOutput": "output_dtype",
    "DistinctArgument": "distinct_argument",
    "ContextArgument": "context_argument",
    "APISequence": "api_sequence",
    "Threshold": "threshold",
    "VarPeriodicChange": "periodic_change",
    "EventContain": "event_contain",
    "ConsistentInputOutput": "input_output",
    "CrossRankValue": "cross_rank_values",
    "GradApplied": "grad_applied",
    "GradCleared": "grad_cleared",
    "AutocastRegion": "autocast_region",
    "UpdateMode": "update_mode",
}
# How triage ranks the violations of a relation at one step, first to last: the context a
# computation ran in, then what happened to the state, then call order and arguments.
TRIAGE_KINDS = ("context", "state", "ordering", "other")


class Relation(Protocol):
    """What a relation module declares (a module satisfies it through its globals).

    Optional, with their defaults: ``CROSS_RANK = False`` (its examples join the ranks'
    halves), ``SHARED_SUBJECT = None`` (one subject in triage whatever API a violation names),
    ``outside``, ``outcome``, ``record_filter``, ``finalize`` and ``HALF`` (see ``inference.stream``)."""

    RELATION: str
    ID_PREFIX: str
    SUBJECT_FIELDS: tuple[str, ...]
    TRIAGE_KIND: str
    LEARNS_FROM: str
    READS: tuple[str, ...]
    Collector: type

    def key_of(self, example: Any) -> Hashable: ...

    def invariant_key(self, invariant: Any) -> Hashable: ...

    def infer(self, groups: dict[Hashable, list[Any]], sources: tuple[str, ...]) -> list[Any]: ...

    def violates(self, invariant: Any, example: Any) -> bool: ...

    def violation(self, invariant: Any, example: Any) -> dict[str, Any]: ...

    def needs(self, req: Needs, invariant: Any) -> None: ...


class Needs(Protocol):
    """What a relation module's ``needs(req, invariant)`` fills in for check mode: the calls to
    record, at which detail, and the state to snapshot (``check.requirements`` builds it)."""

    module_calls: tuple[str, str] | None  # every module call, at these (arguments, return) levels
    keep_nesting: bool  # keep every policy API wrapped, so that "outermost call" keeps its meaning

    def need_call(self, api: Any, args: str = ..., returns: str = ...) -> None: ...

    def need_state(self, point: Any, items: Iterable[str]) -> None: ...

    def items_for(self, point: str | None, attribute: str) -> set[str]:
        """The state items that give a tensor ``attribute`` at ``point`` (None: the default)."""
        ...

    def policy_items(self, point: str) -> set[str]:
        """The items the loaded policy snapshots at ``point``."""
        ...


def module(name: str) -> ModuleType | None:
    """The module of relation ``name``, imported on first use; None for a name that is not a
    relation."""
    path = MODULES.get(name)
    return importlib.import_module(f"{__name__}.{path}") if path is not None else None


def load(names: Collection[str] | None = None) -> list[ModuleType]:
    """The modules of the relations in ``names`` (all when None), in ``MODULES`` order; names
    that are not relations are left out."""
    wanted = list(MODULES) if names is None else [n for n in MODULES if n in names]
    return [importlib.import_module(f"{__name__}.{MODULES[name]}") for name in wanted]


def compares_ranks(name: str) -> bool:
    """Whether relation ``name`` compares ranks (its module's ``CROSS_RANK``; False for a name
    that is not a relation). Not ``cross_rank``: that is a relation module's name, and importing
    it would replace the function in this package's namespace."""
    found = module(name)
    return bool(getattr(found, "CROSS_RANK", False))
