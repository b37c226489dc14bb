"""Invariants and the invariants file (format documented in docs/invariants.md).

The file is versioned JSON, deterministic (same traces, same bytes: no timestamps, invariants
sorted by id) and readable by people (indented, one description per invariant). Ids are derived
from an invariant's content, so the same invariant has the same id in every file.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import traincheck_agent
from traincheck_agent.inference import relations
from traincheck_agent.inference.preconditions import Clause, Domain
from traincheck_agent.inference.references import Reference, reference_problem
from traincheck_agent.inference.references import from_json as reference_from_json
from traincheck_agent.input_files import read_limited

FILE_FORMAT = "traincheck-invariants"
FILE_VERSION = 1
MAX_FILE_BYTES = 64 << 20
MAX_VALUE_DEPTH = 32  # nesting of a subject or precondition value; inference writes at most 3
# Subject fields that name things (an API, a variable, an effect): their values are strings.
NAME_FIELDS = ("api", "event", "child", "between", "argument", "attribute", "variable", "vtype",
               "form", "property", "op", "effect", "position", "module", "autocast", "model",
               "phase")


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
    # For each context feature the relation names, the values the passing examples showed:
    # an example with another value is outside what the references cover, and not judged.
    domain: dict[str, list[Any]] = field(default_factory=dict, compare=False)

    @functools.cached_property  # frozen: the id cannot go stale (computed for every report and file)
    def id(self) -> str:
        body = json.dumps(
            {"relation": self.relation, "subject": self.subject,
             "precondition": [c.to_json() for c in self.precondition]},
            sort_keys=True,
        )
        found = relations.module(self.relation)
        prefix = found.ID_PREFIX if found is not None else self.relation[:2].lower()
        return f"{prefix}-{hashlib.sha256(body.encode()).hexdigest()[:12]}"

    @functools.cached_property
    def domain_sets(self) -> Domain:
        """The domain as a checker reads it: (feature, set of values seen) pairs."""
        return tuple((name, frozenset(values)) for name, values in sorted(self.domain.items()))

    def to_json(self) -> dict[str, Any]:
        out = {
            "id": self.id,
            "relation": self.relation,
            "subject": self.subject,
            "precondition": [c.to_json() for c in self.precondition],
            "support": self.support,
            "description": self.description,
            "sources": list(self.sources),
        }
        if self.domain:
            out["domain"] = {name: list(values) for name, values in sorted(self.domain.items())}
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Invariant:
        return cls(
            relation=raw["relation"],
            subject=dict(raw["subject"]),
            precondition=tuple(Clause.from_json(c) for c in raw.get("precondition", [])),
            support=dict(raw.get("support", {})),
            description=str(raw.get("description", "")),
            sources=tuple(raw.get("sources", [])),
            domain={str(k): list(v) for k, v in raw.get("domain", {}).items()},
        )


def write_invariants(invariants: list[Invariant], path: str | Path, sources: list[str],
                     references: list[Reference] | None = None) -> None:
    """Write the file: ``sources`` are the reference traces' names, ``references`` how to find
    them again (``inference.references``). The file is replaced in one step (written beside it,
    then renamed), so a failed write leaves the previous file whole."""
    doc: dict[str, Any] = {
        "format": FILE_FORMAT,
        "version": FILE_VERSION,
        "generated_by": f"traincheck-agent {traincheck_agent.__version__}",
        "sources": sorted(sources),
    }
    if references is not None:
        doc["references"] = [r.to_json() for r in references]
    doc["invariants"] = [inv.to_json() for inv in sorted(invariants, key=lambda i: i.id)]
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n", encoding="utf-8")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _require(raw: dict[str, Any], key: str, kind: type, path: Path, where: str) -> Any:
    if key not in raw:
        raise InvariantFileError(path, where, f"missing key {key!r}")
    if not isinstance(raw[key], kind):
        raise InvariantFileError(path, where, f"{key!r} should be {kind.__name__}, got {type(raw[key]).__name__}")
    return raw[key]


def _read_limited(path: Path) -> bytes:
    try:
        return read_limited(path, MAX_FILE_BYTES)
    except ValueError as exc:
        raise InvariantFileError(path, "", str(exc)) from None


class _BadValue(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _BadValue(f"duplicate key {key[:80]!r}")
        out[key] = value
    return out


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadValue(f"number {text[:40]} is out of range")
    return value


def _no_constant(text: str) -> float:
    raise _BadValue(f"{text} is not allowed (only finite numbers)")


def _parse(path: Path) -> Any:
    """The JSON document of the file; any problem is an InvariantFileError naming it."""
    try:
        text = _read_limited(path).decode("utf-8")
        return json.loads(text, object_pairs_hook=_unique_keys, parse_float=_finite,
                          parse_constant=_no_constant)
    except InvariantFileError:
        raise
    except OSError as exc:
        raise InvariantFileError(path, "", f"cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InvariantFileError(path, "", f"not UTF-8 text: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InvariantFileError(path, f"line {exc.lineno}", f"not valid JSON: {exc.msg}") from None
    except _BadValue as exc:
        raise InvariantFileError(path, "", f"not valid JSON: {exc}") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise InvariantFileError(path, "", f"not valid JSON: {str(exc)[:200]}") from None
    except RecursionError:
        raise InvariantFileError(path, "", "not valid JSON: nested too deeply") from None


def _depth(value: Any, limit: int) -> int:
    """How deeply ``value`` nests (lists and objects), counting no further than ``limit + 1``."""
    level, frontier = 0, [value]
    while frontier and level <= limit:
        frontier = [v for item in frontier
                    for v in (item.values() if isinstance(item, dict) else item if isinstance(item, list) else ())]
        level += 1 if frontier else 0
    return level


def _subject_problem(relation: str, subject: dict[str, Any]) -> str:
    """What is wrong with the subject of a ``relation`` invariant, or ""."""
    found = relations.module(relation)
    if found is None:
        return f"unknown relation {relation[:80]!r} (known: {', '.join(relations.MODULES)})"
    missing = [f for f in found.SUBJECT_FIELDS if f not in subject]
    if missing:
        return f"{relation} subject lacks {', '.join(missing)}"
    for name in NAME_FIELDS:
        if name in subject and not isinstance(subject[name], str):
            return f"subject {name} should be a string, got {type(subject[name]).__name__}"
    if _depth(subject, MAX_VALUE_DEPTH) > MAX_VALUE_DEPTH:
        return f"subject nested deeper than {MAX_VALUE_DEPTH} levels"
    return ""


_SCALARS = (str, int, float, bool, type(None))


def _domain_problem(domain: Any) -> str:
    """What is wrong with an invariant's domain, or "": an object of lists of scalars."""
    if not isinstance(domain, dict):
        return f"expected an object, got {type(domain).__name__}"
    for name, values in domain.items():
        if not isinstance(values, list) or not all(isinstance(v, _SCALARS) for v in values):
            return f"{str(name)[:80]!r} should be a list of scalar values"
    return ""


@dataclass(frozen=True)
class InvariantsFile:
    """An invariants file as read: its invariants, the names of the traces they were learned
    from and, for files that record them, where those traces are (None: not recorded, as in
    files written before ``references`` existed)."""

    invariants: list[Invariant]
    sources: tuple[str, ...]
    references: list[Reference] | None


def read_invariants(path: str | Path) -> list[Invariant]:
    """Read and validate an invariants file; errors name the file and the entry."""
    return read_invariants_file(path).invariants


def read_invariants_file(path: str | Path) -> InvariantsFile:
    """Read and validate an invariants file with what it records of its references."""
    path = Path(path)
    doc = _parse(path)
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
        problem = _domain_problem(raw.get("domain", {}))
        if problem:
            raise InvariantFileError(path, f"{where}.domain", problem)
        for j, clause in enumerate(_require(raw, "precondition", list, path, where)):
            if not isinstance(clause, dict) or "field" not in clause or "value" not in clause:
                raise InvariantFileError(path, f"{where}.precondition[{j}]", "expected an object with field and value")
        try:
            invariant = Invariant.from_json(raw)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvariantFileError(path, where, f"malformed: {exc}") from None
        problem = _subject_problem(invariant.relation, invariant.subject)
        if not problem and _depth(raw["precondition"], MAX_VALUE_DEPTH + 2) > MAX_VALUE_DEPTH + 2:
            problem = f"precondition nested deeper than {MAX_VALUE_DEPTH} levels"
        if problem:
            raise InvariantFileError(path, where, problem)
        out.append(invariant)
    sources = doc.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise InvariantFileError(path, "sources", "expected a list of trace names")
    return InvariantsFile(out, tuple(sources), _references(doc, path))


def _references(doc: dict[str, Any], path: Path) -> list[Reference] | None:
    raw = doc.get("references")
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise InvariantFileError(path, "references", f"expected a list, got {type(raw).__name__}")
    for i, entry in enumerate(raw):
        problem = reference_problem(entry)
        if problem:
            raise InvariantFileError(path, f"references[{i}]", problem)
    return [reference_from_json(entry) for entry in raw]
