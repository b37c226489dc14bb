"""The reference traces an invariants file was learned from: how the file records them, and how
``traincheck infer --update`` finds them again.

Each reference is recorded by its path relative to the invariants file's directory (so a
directory holding both can be moved or copied as a whole), its file name, its size and a quick
digest: xxh3-64 over the size, the first and the last 64 KiB. The digest reads 128 KiB whatever
the trace's size; it tells a trace replaced by another run (a new header), cut short or
appended to from the one that was read, which is what matters for re-learning, but not an edit
in the middle of a large file that keeps its size.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

DIGEST_PREFIX = "xxh3-64:"
EDGE_BYTES = 64 << 10  # read from each end of a trace for its digest
FIX = "pass the traces it was learned from with --references PATH..."


class ReferenceTraceError(ValueError):
    """An old reference cannot be used as recorded; the message names it and what to do."""


@dataclass(frozen=True)
class Reference:
    """One recorded reference trace."""

    path: str  # relative to the invariants file's directory, with forward slashes
    name: str
    size: int
    digest: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "name": self.name, "size": self.size, "digest": self.digest}


def quick_digest(path: Path) -> tuple[int, str]:
    """(size, digest) of a trace file: see the module docstring."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        h = xxhash.xxh3_64()
        h.update(str(size).encode())
        h.update(f.read(EDGE_BYTES))
        if size > EDGE_BYTES:
            f.seek(max(EDGE_BYTES, size - EDGE_BYTES))
            h.update(f.read(EDGE_BYTES))
    return size, DIGEST_PREFIX + h.hexdigest()


def describe(files: list[Path], invariants_path: Path) -> list[Reference]:
    """How an invariants file written to ``invariants_path`` records the traces ``files``,
    sorted by name, then path (stable whatever order or directory they were given in)."""
    home = Path(os.path.abspath(invariants_path)).parent
    out = []
    for file in files:
        size, digest = quick_digest(file)
        relative = Path(os.path.relpath(os.path.abspath(file), home)).as_posix()
        out.append(Reference(relative, file.name, size, digest))
    return sorted(out, key=lambda r: (r.name, r.path))


def locate(references: list[Reference], invariants_path: Path) -> list[Path]:
    """The recorded references as files, each checked to be the trace that was read; raises
    ReferenceTraceError naming the first that is missing or has changed."""
    home = Path(os.path.abspath(invariants_path)).parent
    found = []
    for ref in references:
        path = home / ref.path
        shown = f"{invariants_path}: reference trace {ref.path}"
        if not path.is_file():
            raise ReferenceTraceError(f"{shown} is missing (looked for {path}); {FIX}")
        try:
            size, digest = quick_digest(path)
        except OSError as exc:
            raise ReferenceTraceError(f"{shown} cannot be read ({exc.strerror or exc}); {FIX}") from None
        if size != ref.size:
            raise ReferenceTraceError(f"{shown} has changed since the invariants were learned "
                                 f"(size {ref.size} -> {size} bytes); {FIX}")
        if digest != ref.digest:
            raise ReferenceTraceError(f"{shown} has changed since the invariants were learned "
                                 f"(same size, different contents); {FIX}")
        found.append(path)
    return found


def reference_problem(raw: Any) -> str:
    """What is wrong with one entry of a file's ``references`` list, or ""."""
    if not isinstance(raw, dict):
        return f"expected an object, got {type(raw).__name__}"
    for key, kind in (("path", str), ("name", str), ("size", int), ("digest", str)):
        if not isinstance(raw.get(key), kind) or isinstance(raw.get(key), bool):
            return f"{key!r} should be {kind.__name__}"
    return ""


def from_json(raw: dict[str, Any]) -> Reference:
    return Reference(raw["path"], raw["name"], raw["size"], raw["digest"])
