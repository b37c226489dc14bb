"""Short names for sets of variable names, for a person to read.

``model.layers.0.weight`` ... ``model.layers.11.weight`` read as ``model.layers.*.weight``, but
only because twelve numbered siblings are there: a number is generalised only when several names
differ in it, and a lone ``h.1`` keeps its exact name (``h.*`` would claim layers that were never
seen). Leaf names under one prefix are merged: ``model.fc*.{bias,weight}``.
"""

from __future__ import annotations

import re
from collections import defaultdict

_DIGITS = re.compile(r"\d+")


def variable_pattern(name: str) -> str:
    """``model.layers.3.weight`` -> ``model.layers.*.weight`` (every number generalised)."""
    return _DIGITS.sub("*", name)


def _prefix(pattern: str) -> str:
    return pattern.rsplit(".", 1)[0] if "." in pattern else pattern


def name_patterns(variables: list[str]) -> list[tuple[str, int]]:
    """Patterns covering ``variables``, each with how many distinct names it stands for, most
    names first: numbers are generalised only where two or more names share the pattern, and
    patterns under one prefix merge their leaves (``model.conv*.{bias,weight}``)."""
    names = sorted({v for v in variables if v})
    by_general: dict[str, list[str]] = defaultdict(list)
    for name in names:
        by_general[variable_pattern(name)].append(name)
    counted: dict[str, int] = {}
    for general, members in by_general.items():
        if len(members) > 1:
            counted[general] = len(members)
        else:
            counted[members[0]] = 1
    by_prefix: dict[str, list[str]] = defaultdict(list)
    for pattern in counted:
        by_prefix[_prefix(pattern) if "." in pattern else pattern].append(pattern)
    merged: dict[str, int] = {}
    for prefix, patterns in by_prefix.items():
        if len(patterns) > 1 and all("." in p for p in patterns):
            leaves = sorted(p.rsplit(".", 1)[1] for p in patterns)
            merged[f"{prefix}.{{{','.join(leaves)}}}"] = sum(counted[p] for p in patterns)
        else:
            for pattern in patterns:
                merged[pattern] = counted[pattern]
    return sorted(merged.items(), key=lambda item: (-item[1], item[0]))


def describe_patterns(variables: list[str]) -> str:
    """``name_patterns`` in one string: ``model.conv*.{bias,weight}, model.bn1.{bias,weight}``."""
    return ", ".join(pattern for pattern, _ in name_patterns(variables))


def common_scope(variables: list[str]) -> str:
    """The longest dotted prefix all ``variables`` share (``model``), the name itself for one
    variable, "" when they share none."""
    names = sorted({v for v in variables if v})
    if not names:
        return ""
    if len(names) == 1:
        return names[0]
    split = [name.split(".") for name in names]
    shared: list[str] = []
    for parts in zip(*split, strict=False):
        if len(set(parts)) != 1:
            break
        shared.append(parts[0])
    return ".".join(shared)


__all__ = ["common_scope", "describe_patterns", "name_patterns", "variable_pattern"]
