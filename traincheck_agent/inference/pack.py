"""Invariants packs: invariants files shipped with the package, named by a word instead of a
path (``TRAINCHECK_INV=builtin``, ``traincheck check -i builtin``).

A pack is an ordinary invariants file with one more top-level key, ``pack``: its name and
version, the torch and agent versions it was built with, and the pipelines it was learned from
(``scripts/build_builtin_pack.py`` writes it; docs/checking.md says what it holds).
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from traincheck_agent.inference.invariant import FILE_FORMAT, FILE_VERSION, Invariant

BUILTIN = "builtin"  # the name that stands for the built-in pack wherever an invariants file is named
PACK_VERSION = 1
PACKS_DIR = Path(__file__).resolve().parents[1] / "packs"


def builtin_pack_path() -> Path:
    return PACKS_DIR / f"{BUILTIN}.json"


def is_builtin(path: str | Path) -> bool:
    """Whether an invariants file named by the user is the built-in pack: the bare word
    ``builtin`` (a file of that name is named by another path, ``/data/builtin``)."""
    return str(path) == BUILTIN


def resolve(path: Path) -> Path:
    """The file an invariants path names: the pack's file for ``builtin``, else the path."""
    return builtin_pack_path() if is_builtin(path) else path


def write_pack(invariants: list[Invariant], path: str | Path, *, torch_version: str, agent_version: str,
               pipelines: list[str], checked_on: list[str], name: str = BUILTIN) -> None:
    """Write ``invariants`` as a pack: an invariants file (sorted, indented) with a header that
    names the pipelines it was learned from and those whose clean runs it was checked on."""
    doc = {
        "format": FILE_FORMAT,
        "version": FILE_VERSION,
        "generated_by": f"traincheck-agent {agent_version}",
        "pack": {"name": name, "version": PACK_VERSION, "torch": torch_version, "pipelines": sorted(pipelines),
                 "checked_on": sorted(checked_on)},
        "sources": sorted(pipelines),
        "invariants": [inv.to_json() for inv in sorted(invariants, key=lambda i: i.id)],
    }
    Path(path).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def pack_header(path: Path) -> dict[str, Any]:
    """The ``pack`` header of an invariants file, or {} (not a pack, or unreadable: reading the
    invariants themselves reports that)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    header = doc.get("pack") if isinstance(doc, dict) else None
    return header if isinstance(header, dict) else {}


def running_torch_version() -> str | None:
    """The version of the torch this process runs (or would import), without importing it."""
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None) if torch is not None else None
    if isinstance(version, str):
        return version
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _major_minor(version: str) -> tuple[str, ...]:
    return tuple(version.split("+", 1)[0].split(".")[:2])


def torch_mismatch(header: dict[str, Any], running: str | None = None) -> str:
    """One line when the pack was built with another torch major.minor than the running one
    (it is still used), else ""."""
    built = header.get("torch")
    running = running if running is not None else running_torch_version()
    if not isinstance(built, str) or not running or _major_minor(built) == _major_minor(running):
        return ""
    name = str(header.get("name", BUILTIN))
    return (f"the {name} invariants pack was built with torch {built}, this is torch {running}; "
            "checking with it anyway (rebuild it with scripts/build_builtin_pack.py)")
