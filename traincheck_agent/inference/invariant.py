"""Invariants and the invariants file (format documented in docs/invariants.md).

The file is versioned JSON, deterministic (same traces, same bytes: no timestamps, invariants
sorted by id) and readable by people (indented, one description per invariant). Ids are derived
from an invariant's content, so the same invariant has the same id in every file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import traincheck_agent
from traincheck_agent.inference.preconditions import Clause

FILE_FORMAT = "traincheck-invariants"
FILE_VERSION = 1
MAX_FILE_BYTES = 64 << 20
ID_PREFIXES = {
    "StateTransition": "st",
    "CrossRankConsistent": "cr",
    "ConsistentOutput": "co",
    "DistinctArgument": "di",
    "ContextArgument": "ca",
    "APISequence": "as",
    "Threshold": "th",
    "VarPeriodicChange": "vp",
    "EventContain": "ec",
    "ConsistentInputOutput": "io",
    "CrossRankValue": "cv",
}


class InvariantFileError(ValueError):
    def __init__(self, path: str | Path, where: str, problem: str) -> None:
        self.path, self.where, self.problem = str(path), where, problem
        super().__init__(f"{path}: {where}: {problem}" if where else f"{path}: {problem}")


@dataclass(frozen=True)
class Invariant:
    relation: str
    subject: dict[str, Any]
    precondition: tuple[Clause, ...]
    support: dict[str, int] = field(default_factory=dict, compare=False)
    description: str = field(default="", compare=False)
    sources: tuple[str, ...] = field(default=(), compare=False)

    @property
    def id(self) -> str:
        body = json.dumps(
            {"relation": self.relation, "subject": self.subject,
             "precondition": [c.to_json() for c in self.precondition]},
            sort_keys=True,
        )
        prefix = ID_PREFIXES.get(self.relation, self.relation[:2].lower())
        return f"{prefix}-{hashlib.sha256(body.encode()).hexdigest()[:12]}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "relation": self.relation,
            "subject": self.subject,
            "precondition": [c.to_json() for c in self.precondition],
            "support": self.support,
            "description": self.description,
            "sources": list(self.sources),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Invariant:
        return cls(
            relation=raw["relation"],
            subject=dict(raw["subject"]),
            precondition=tuple(Clause.from_json(c) for c in raw.get("precondition", [])),
            support=dict(raw.get("support", {})),
            description=str(raw.get("description", "")),
            sources=tuple(raw.get("sources", [])),
        )


def write_invariants(invariants: list[Invariant], path: str | Path, sources: list[str]) -> None:
    doc = {
        "format": FILE_FORMAT,
        "version": FILE_VERSION,
        "generated_by": f"traincheck-agent {traincheck_agent.__version__}",
        "sources": sorted(sources),
        "invariants": [inv.to_json() for inv in sorted(invariants, key=lambda i: i.id)],
    }
    Path(path).write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def _require(raw: dict[str, Any], key: str, kind: type, path: Path, where: str) -> Any:
    if key not in raw:
        raise InvariantFileError(path, where, f"missing key {key!r}")
    if not isinstance(raw[key], kind):
        raise InvariantFileError(path, where, f"{key!r} should be {kind.__name__}, got {type(raw[key]).__name__}")
    return raw[key]


def read_invariants(path: str | Path) -> list[Invariant]:
    """Read and validate an invariants file; errors name the file and the entry."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InvariantFileError(path, "", f"file is {size} bytes, over the {MAX_FILE_BYTES} byte limit")
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvariantFileError(path, "", f"cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InvariantFileError(path, "", f"not UTF-8 text: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InvariantFileError(path, f"line {exc.lineno}", f"not valid JSON: {exc.msg}") from None
    if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT:
        raise InvariantFileError(path, "", f"not a traincheck invariants file (expected format {FILE_FORMAT!r})")
    if doc.get("version") != FILE_VERSION:
        raise InvariantFileError(path, "version", f"unsupported version {doc.get('version')!r} (this reads {FILE_VERSION})")
    entries = _require(doc, "invariants", list, path, "")
    out = []
    for i, raw in enumerate(entries):
        where = f"invariants[{i}]"
        if not isinstance(raw, dict):
            raise InvariantFileError(path, where, f"expected an object, got {type(raw).__name__}")
        _require(raw, "relation", str, path, where)
        _require(raw, "subject", dict, path, where)
        for j, clause in enumerate(_require(raw, "precondition", list, path, where)):
            if not isinstance(clause, dict) or "field" not in clause or "value" not in clause:
                raise InvariantFileError(path, f"{where}.precondition[{j}]", "expected an object with field and value")
        try:
            out.append(Invariant.from_json(raw))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvariantFileError(path, where, f"malformed: {exc}") from None
    return out
