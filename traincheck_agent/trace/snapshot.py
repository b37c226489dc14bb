"""Snapshot records: everything one snapshot point looked at, in one record of columns.

A snapshot of a model touches every parameter at each of several points of a step. Written as
one ``state`` record per variable, each point costs a dict, a record, a writer slot and a JSON
line per tensor; written as one record, the point's own fields appear once and the variables
sit in columns::

    {"kind": "snapshot", "where": ..., "call": ..., "step": ..., "phase": ..., "t_ns": ...,
     ("grad_sync", "closure_calls" where they apply), "blocks": [block, ...]}

A block is a run of variables that share their attribute names::

    {"vars": [name, ...],
     "vtype": "Parameter" | [one per variable],
     "owner": "model" | [one per variable, null for none]     (absent: no owner),
     "cols": {attribute: [one value per variable], ...},
     "extra": [[index, {attribute: value}], ...]               (optional: a few variables' own)}

Relations read a snapshot as it is: ``blocks_of`` checks its blocks (once per record, however
many relations ask), and a ``Block`` gives one variable's attributes or one attribute of every
variable. ``expand`` gives the per-variable ``state`` records a snapshot stands for, in the order
the variables were looked at, for readers that ask for them (``TraceFile.records``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from traincheck_agent.trace.schema import KIND_SNAPSHOT, KIND_STATE

BLOCKS = "blocks"


class SnapshotFormatError(ValueError):
    """A snapshot record whose blocks do not have the shape above."""


class SnapshotBuilder:
    """The record of one snapshot point, filled block by block (the state probe's side)."""

    __slots__ = ("record", "blocks")

    def __init__(self, base: dict[str, Any]) -> None:
        self.blocks: list[dict[str, Any]] = []
        self.record = dict(base, kind=KIND_SNAPSHOT)
        self.record[BLOCKS] = self.blocks

    def add_columns(self, names: list[str], vtype: str | list[str], owner: str | list[str | None] | None,
                    cols: dict[str, list[Any]], extra: list[list[Any]] | None = None) -> None:
        """Add a block of variables (``cols``: one list per attribute, as long as ``names``)."""
        if not names:
            return
        block: dict[str, Any] = {"vars": names, "vtype": vtype, "cols": cols}
        if owner is not None:
            block["owner"] = owner
        if extra:
            block["extra"] = extra
        self.blocks.append(block)

    def add_row(self, name: str, vtype: str, owner: str | None, attrs: dict[str, Any]) -> None:
        """Add one variable; it joins the last block when that block holds variables of the
        same kind, owner and attribute names (an optimizer's per-parameter scalars)."""
        last = self.blocks[-1] if self.blocks else None
        if (last is not None and last["vtype"] == vtype and last.get("owner") == owner
                and "extra" not in last and last["cols"].keys() == attrs.keys()):
            last["vars"].append(name)
            for key, column in last["cols"].items():
                column.append(attrs[key])
            return
        self.add_columns([name], vtype, owner, {key: [value] for key, value in attrs.items()})

    def built(self) -> dict[str, Any] | None:
        """The record, or None when the point looked at nothing."""
        return self.record if self.blocks else None


def _per_variable(value: Any, n: int, what: str) -> list[Any]:
    if isinstance(value, list):
        if len(value) != n:
            raise SnapshotFormatError(f"{what} has {len(value)} entries for {n} variables")
        return value
    return [value] * n


def expand(record: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The ``state`` records of a snapshot record, in order. Raises ``SnapshotFormatError``
    (before yielding anything) when its blocks are malformed."""
    found = list(variables(record))
    base = {key: value for key, value in record.items() if key != BLOCKS}
    base["kind"] = KIND_STATE
    for name, vtype, owner, attrs in found:
        out = dict(base, var=name, vtype=vtype, attrs=attrs)
        if owner is not None:
            out["owner"] = owner
        yield out


def variables(record: dict[str, Any]) -> Iterator[tuple[str, Any, Any, dict[str, Any]]]:
    """(name, vtype, owner, attributes) of each variable of a snapshot record, in order. Raises
    ``SnapshotFormatError`` (before yielding anything) when its blocks are malformed."""
    for block in blocks_of(record):
        for i, name in enumerate(block.names):
            yield name, block.vtypes[i], block.owners[i], block.attrs(i)


class _Absent:
    """An attribute a variable's snapshot did not record, in a ``Block.column``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


class Block(NamedTuple):
    """A block of a snapshot record, checked: vtype and owner one per variable, extras by index."""

    names: list[str]
    vtypes: list[Any]
    owners: list[Any]
    cols: dict[str, list[Any]]
    extra: dict[int, dict[str, Any]]

    def attrs(self, i: int) -> dict[str, Any]:
        """The attributes of the block's ``i``-th variable."""
        attrs = {key: column[i] for key, column in self.cols.items()}
        more = self.extra.get(i) if self.extra else None
        if more:
            attrs.update(more)
        return attrs

    def column(self, attribute: str) -> list[Any]:
        """One attribute of every variable of the block (``ABSENT`` where one did not record it):
        what a relation that reads a few attributes walks instead of each variable's dict."""
        values = self.cols.get(attribute)
        if not self.extra:
            return [ABSENT] * len(self.names) if values is None else values
        values = [ABSENT] * len(self.names) if values is None else list(values)
        for i, more in self.extra.items():
            if attribute in more:
                values[i] = more[attribute]
        return values


# The last record ``blocks_of`` checked, its list of blocks as it was and the checked blocks:
# each relation that reads snapshots asks for the blocks of the same record in turn, and they
# are checked once (records are not changed once made). One tuple, replaced whole, so a reader
# on another thread sees a matching set.
_last_checked: tuple[Any, Any, int, list[Block]] = (None, None, 0, [])


def blocks_of(record: dict[str, Any]) -> list[Block]:
    """The blocks of a snapshot record, checked. Raises ``SnapshotFormatError``."""
    global _last_checked
    blocks = record.get(BLOCKS)
    last = _last_checked
    if last[0] is record and last[1] is blocks and last[2] == len(blocks):
        return last[3]
    if not isinstance(blocks, list):
        raise SnapshotFormatError("a snapshot record without a list of blocks")
    checked = [_checked_block(block) for block in blocks]
    _last_checked = (record, blocks, len(blocks), checked)
    return checked


def _checked_block(block: Any) -> Block:
    if not isinstance(block, dict):
        raise SnapshotFormatError(f"a block that is {type(block).__name__}, not an object")
    names = block.get("vars")
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise SnapshotFormatError("a block whose 'vars' is not a list of names")
    n = len(names)
    cols = block.get("cols")
    if not isinstance(cols, dict):
        raise SnapshotFormatError("a block whose 'cols' is not an object")
    for key, column in cols.items():
        if not isinstance(column, list) or len(column) != n:
            raise SnapshotFormatError(f"a block whose column {str(key)[:40]!r} does not have {n} entries")
    vtype = block.get("vtype")
    if not isinstance(vtype, (str, list)):
        raise SnapshotFormatError("a block without a 'vtype'")
    extra: dict[int, dict[str, Any]] = {}
    for entry in block.get("extra") or ():
        if (not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], int)
                or not 0 <= entry[0] < n or not isinstance(entry[1], dict)):
            raise SnapshotFormatError("a block whose 'extra' is not a list of [index, attributes] pairs")
        extra[entry[0]] = entry[1]
    return Block(names, _per_variable(vtype, n, "'vtype'"), _per_variable(block.get("owner"), n, "'owner'"),
                 cols, extra)


def from_state(record: dict[str, Any]) -> dict[str, Any]:
    """The snapshot record of one variable that a per-variable ``state`` record stands for (a
    schema-1 trace read by a relation that reads snapshots)."""
    base = {key: value for key, value in record.items() if key not in _VARIABLE_FIELDS}
    block: dict[str, Any] = {"vars": [record.get("var")], "vtype": record.get("vtype"),
                             "cols": {key: [value] for key, value in (record.get("attrs") or {}).items()}}
    if record.get("owner") is not None:
        block["owner"] = record["owner"]
    base["kind"] = KIND_SNAPSHOT
    base[BLOCKS] = [block]
    return base


_VARIABLE_FIELDS = frozenset({"var", "vtype", "owner", "attrs"})


def variables_in(record: dict[str, Any]) -> int:
    """How many variables a snapshot record holds (0 when its blocks are malformed)."""
    blocks = record.get(BLOCKS)
    if not isinstance(blocks, list):
        return 0
    return sum(len(b["vars"]) for b in blocks if isinstance(b, dict) and isinstance(b.get("vars"), list))
