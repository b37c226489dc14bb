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


def _module_level_imports() -> dict[str, set[str]]:
    """What each module imports when it is itself imported: statements of the module body and of
    its plain ``if`` / ``try`` blocks, not those inside functions or under ``TYPE_CHECKING``."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}

    def body_imports(statements: list[ast.stmt]) -> list[ast.stmt]:
        found = []
        for node in statements:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                found += body_imports(node.body) + body_imports(node.orelse)
            elif isinstance(node, ast.Try):
                found += body_imports(node.body)
        return found

    for name, path in modules.items():
        edges = set()
        for node in body_imports(ast.parse(path.read_text(), str(path)).body):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    edges.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names}
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def test_no_import_cycle_among_the_packages_modules():
    """A cycle makes the result depend on which module is imported first; lazy imports inside
    functions are how a module reaches one that imports it."""
    graph = _module_level_imports()
    cycles = []
    for start in graph:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append(path)
                elif nxt not in path and nxt > start:  # each cycle once, from its least module
                    stack.append((nxt, path + [nxt]))
    assert cycles == []
