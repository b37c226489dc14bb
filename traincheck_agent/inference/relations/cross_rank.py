"""CrossRankConsistent: a variable holds the same value on every rank at the same point of the
same step, e.g. a DDP replica's parameters after each optimizer step, or a parameter that
tensor parallelism does not split (``tensor_model_parallel=False``) on every TP rank.

Snapshots are matched by (run, point, variable, step, occurrence within the step), so the
*same-named* variable is compared, never two different parameters that happen to share a
shape. Examples group ranks by key in one pass over the traces: the cost grows with the number
of snapshots, not with the square of the number of ranks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traincheck_agent.inference.examples import DESCRIPTIVE_ATTRS, TENSOR_ATTRS
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.inference.preconditions import (
    PARTIES,
    FeatureExample,
    deduce,
    holds_all,
    with_condition,
)
from traincheck_agent.trace.reader import TraceFile, find_trace_files
from traincheck_agent.trace.schema import KIND_STATE

RELATION = "CrossRankConsistent"
MIN_PASSING = 5
MIN_STEPS = 2


@dataclass(frozen=True)
class RankExample(FeatureExample):
    where: str
    attribute: str
    var: str
    step: int
    ranks: tuple[int, ...]
    equal: bool
    features: tuple[tuple[str, Any], ...]


def collect(paths: Iterable[str | Path]) -> dict[tuple[str, str], list[RankExample]]:
    # key -> rank -> (hash, features)
    seen: dict[tuple, dict[int, tuple[str | None, tuple]]] = defaultdict(dict)
    for path in find_trace_files(paths):
        trace = TraceFile(path)
        header = trace.header
        run, rank = str(header.get("run_id")), int(header.get("rank", 0))
        occurrences: dict[tuple, int] = defaultdict(int)
        for record in trace.records():
            if record.get("kind") == "process" and isinstance(record.get("rank"), int):
                rank = record["rank"]
            if record.get("kind") != KIND_STATE:
                continue
            attrs = record.get("attrs", {})
            base = (record.get("where"), record.get("var"), record.get("step"))
            occurrence = occurrences[base]
            occurrences[base] += 1
            features = tuple(sorted(
                [("vtype", record.get("vtype")), ("phase", record.get("phase"))]
                + [(name, attrs[name]) for name in DESCRIPTIVE_ATTRS if name in attrs]
            ))
            shape = attrs.get("shape")
            party = (*features, ("shape", tuple(shape) if isinstance(shape, list) else None))
            for attribute in TENSOR_ATTRS:
                value = attrs.get(attribute)
                if isinstance(value, dict):
                    seen[(run, *base, occurrence, attribute)][rank] = (value.get("h"), party)
    groups: dict[tuple[str, str], list[RankExample]] = defaultdict(list)
    for (_, where, var, step, _, attribute), by_rank in seen.items():
        if len(by_rank) < 2:
            continue
        hashes = {h for h, _ in by_rank.values()}
        groups[(str(where), attribute)].append(RankExample(
            str(where), attribute, str(var), int(step), tuple(sorted(by_rank)), len(hashes) == 1,
            _example_features([by_rank[r][1] for r in sorted(by_rank)])))
    return groups


def _example_features(per_rank: list[tuple[tuple[str, Any], ...]]) -> tuple[tuple[str, Any], ...]:
    """The lowest rank's features, plus each feature's values on all ranks (``parties.<name>``)
    for CONSISTENT / UNEQUAL clauses, e.g. "the shape is the same on every rank"."""
    maps = [dict(f) for f in per_rank]
    out = {k: v for k, v in maps[0].items() if k != "shape"}
    for name in sorted(set().union(*maps)):
        out[PARTIES + name] = tuple(m.get(name) for m in maps)
    return tuple(sorted(out.items()))


def infer(groups: dict[tuple[str, str], list[RankExample]], sources: tuple[str, ...]) -> list[Invariant]:
    invariants = []
    for (where, attribute), group in sorted(groups.items()):
        passing = [e for e in group if e.equal]
        if len(passing) < MIN_PASSING or len({e.step for e in passing}) < MIN_STEPS:
            continue
        precondition = deduce([e.feature_map() for e in passing], [e.feature_map() for e in group if not e.equal])
        if precondition is None:
            continue
        description = f"the {attribute} of each same-named variable is equal on every rank at {where}"
        invariants.append(Invariant(
            relation=RELATION,
            subject={"event": where, "attribute": attribute},
            precondition=tuple(precondition),
            support={"passing": len(passing), "excluded": len(group) - len(passing),
                     "steps": len({e.step for e in passing}), "variables": len({e.var for e in passing})},
            description=with_condition(description, precondition),
            sources=sources,
        ))
    return invariants


def check(invariant: Invariant, groups: dict[tuple[str, str], list[RankExample]]) -> list[RankExample]:
    key = (invariant.subject["event"], invariant.subject["attribute"])
    return [e for e in groups.get(key, []) if holds_all(invariant.precondition, e.feature_map()) and not e.equal]


def violation(invariant: Invariant, ex: RankExample) -> dict[str, Any]:
    return {"step": ex.step, "variable": ex.var, "ranks": list(ex.ranks),
            "message": f"{invariant.description}: {ex.var} differs across ranks {list(ex.ranks)} "
                       f"at step {ex.step} ({ex.where})"}
