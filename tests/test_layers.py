"""The package's layers import one way: base modules <- trace <- inference <- check <- report <- agent,
with the CLI on top (docs/architecture.md). Imports are read with ``ast``, inside functions too, so a
lazy import counts like any other. The arrows that still point the wrong way are listed here, by
module, so that none is added unnoticed; each removed one is taken off the list."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "traincheck_agent"
LAYERS = {"trace": 1, "inference": 2, "check": 3, "report": 4, "agent": 5, "cli": 6, "examples": 6,
          "__main__": 6}
BASE = 0  # every other module: messages, settings, policy/, fingerprint/, ...
# Arrows that point the wrong way, by (importer, imported); none today.
KNOWN_UPWARD: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.get(parts[1], BASE) if len(parts) > 1 else BASE


def _imports() -> set[tuple[str, str]]:
    edges = set()
    for path in PACKAGE.rglob("*.py"):
        importer = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            edges |= {(importer, name) for name in names if name.startswith("traincheck_agent.")}
    return edges


def test_no_import_points_from_a_lower_layer_to_a_higher_one():
    upward = {(a, b) for a, b in _imports() if _layer(b) > _layer(a)}
    assert upward - KNOWN_UPWARD == set(), "new upward imports"
    assert KNOWN_UPWARD - upward == set(), "a known upward import is gone: take it off the list"
