"""Relation templates, one module each.

``MODULES`` names each relation's module, in the order relations are inferred and checked;
``load`` imports only the ones asked for, so that a checker pays for the relations its
invariants use and nothing else (importing all of them costs about 10 ms).
"""

from __future__ import annotations

import importlib
from collections.abc import Collection
from types import ModuleType

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
    "AutocastRegion": "autocast_region",
    "UpdateMode": "update_mode",
}


def load(names: Collection[str] | None = None) -> list[ModuleType]:
    """The modules of the relations in ``names`` (all when None), in ``MODULES`` order; names
    that are not relations are left out."""
    wanted = list(MODULES) if names is None else [n for n in MODULES if n in names]
    return [importlib.import_module(f"{__name__}.{MODULES[name]}") for name in wanted]
