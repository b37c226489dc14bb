"""``traincheck invariants waive``: add a waiver to a waivers file (docs/waivers.md).

The file is the user's, reviewed like code: the new entry is *appended* as text, so every
existing entry, comment and blank line stays byte for byte. Before anything is written, the
file with the entry appended is parsed and validated; if the result is not the old waivers plus
the new one (a file whose ``waivers:`` list is not its last block, or in flow style), nothing
is written and the user is told to add the entry by hand.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from traincheck_agent.cli.errors import fail
from traincheck_agent.terminal_text import visible, write_line

NEW_FILE_HEADER = ("# Waived traincheck violations: each entry says why it is harmless (docs/waivers.md).\n"
                   "# Review changes to this file as you would review code.\n"
                   "version: 1\n"
                   "waivers:\n")
# Indents tried for the new list item, in this order: the first that keeps the file valid wins
# (a list written under `waivers:` may be indented or not).
_ITEM_INDENTS = ("  ", "", "    ")


def add_parser(invariants_commands: Any) -> None:
    from traincheck_agent.check.waivers import DEFAULT_WAIVERS_FILE

    waive = invariants_commands.add_parser(
        "waive", help="waive an invariant (or a pattern of violations) with a reason",
        description="Append a waiver to a waivers file (created if missing; existing entries and "
        "comments are kept as they are). A waived violation is still logged, marked as waived, but "
        "never reported as a failure; use the file with TRAINCHECK_WAIVE=FILE (check mode), "
        "`traincheck check --waive FILE` or `traincheck report --waive FILE`. Either give an "
        "invariants file and the id of one of its invariants, or --relation with --api and/or "
        "--variable glob patterns.")
    waive.add_argument("invariants", type=Path, nargs="?", metavar="INV.json",
                       help="the invariants file that holds ID")
    waive.add_argument("id", nargs="?", metavar="ID", help="the id of the invariant to waive")
    waive.add_argument("--reason", required=True, help="why the violation is harmless (required)")
    waive.add_argument("--file", type=Path, default=DEFAULT_WAIVERS_FILE, metavar="WAIVERS",
                       help=f"the waivers file (default ./{DEFAULT_WAIVERS_FILE})")
    waive.add_argument("--steps", metavar="A-B", help="only at these training steps, e.g. 100-200 or 150")
    waive.add_argument("--relation", help="waive violations of this relation (with --api and/or --variable)")
    waive.add_argument("--api", metavar="GLOB", help="with --relation: the API, a glob such as 'torch.optim.*'")
    waive.add_argument("--variable", metavar="GLOB", help="with --relation: the variable, a glob such as '*.bias'")
    waive.set_defaults(handler=run_waive)


def yaml_quoted(text: str) -> str:
    """``text`` as a YAML double-quoted scalar that reads back as exactly ``text``: quotes,
    backslashes and every character that is not printable are escaped."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        else:
            out.append(visible(char))  # \n, \t, \xNN, \uNNNN, \UNNNNNNNN: YAML's escapes too
    return '"' + "".join(out) + '"'


def _entry(args: argparse.Namespace) -> tuple[dict[str, Any], str] | str:
    """The new waiver as the loader reads it and the comment to put above it; or the problem
    with the arguments."""
    from traincheck_agent.inference.invariant import InvariantFileError, read_invariants

    patterns = {key: getattr(args, key) for key in ("api", "variable") if getattr(args, key) is not None}
    entry: dict[str, Any] = {}
    comment = ""
    if args.relation is not None:
        if args.id is not None:
            return "give either an invariants file and an ID, or --relation with --api/--variable, not both"
        if not patterns:
            return "--relation needs --api and/or --variable (a glob; '*' matches every one)"
        entry["relation"] = args.relation
        entry.update(patterns)
        if args.invariants is not None:
            try:
                invariants = read_invariants(args.invariants)
            except InvariantFileError as exc:
                return str(exc)
            if not any(inv.relation == args.relation for inv in invariants):
                return f"{args.invariants}: no invariant of relation {args.relation!r}"
    else:
        if patterns:
            return "--api and --variable go with --relation"
        if args.invariants is None or args.id is None:
            return "give an invariants file and the ID of the invariant to waive (or --relation with --api/--variable)"
        try:
            invariants = read_invariants(args.invariants)
        except InvariantFileError as exc:
            return str(exc)
        found = next((inv for inv in invariants if inv.id == args.id), None)
        if found is None:
            return f"{args.invariants}: no invariant with id {args.id!r} (`traincheck invariants show` lists them)"
        entry["id"] = args.id
        comment = f"{found.relation}: {found.description}" if found.description else found.relation
    if args.steps is not None:
        entry["steps"] = args.steps.strip()
    entry["reason"] = args.reason
    return entry, comment


def _entry_problem(entry: dict[str, Any]) -> str:
    """What the loader would say of ``entry``, in terms of the command's options; "" if fine."""
    from traincheck_agent.check.waivers import WaiverFileError, waiver_from_raw

    try:
        waiver_from_raw(entry)
    except WaiverFileError as exc:
        key = exc.where.rpartition(".")[2] if "." in exc.where else ""
        option = {"id": "ID", "": ""}.get(key, f"--{key}")
        return f"{option}: {exc.problem}" if option else exc.problem
    return ""


def entry_text(entry: dict[str, Any], comment: str, indent: str) -> str:
    """The YAML lines of one list item, values quoted, with the comment above it."""
    lines = [f"{indent}# {visible(comment)}"] if comment else []
    for number, (key, value) in enumerate(entry.items()):
        lead = f"{indent}- " if number == 0 else f"{indent}  "
        lines.append(f"{lead}{key}: {yaml_quoted(str(value))}")
    return "\n".join(lines) + "\n"


def _addition(path: Path, entry: dict[str, Any], comment: str) -> tuple[str, int, int | None] | str:
    """The text to append to ``path``, the new waiver's index and the index of an existing
    waiver that already says the same (then nothing is appended); or the problem."""
    from traincheck_agent.check.waivers import (
        WaiverFileError,
        read_waivers,
        read_waivers_text,
        waiver_from_raw,
    )

    new = waiver_from_raw(entry)
    try:
        old_text = path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        return f"{path}: cannot be read: {getattr(exc, 'strerror', None) or exc}"
    if not old_text.strip():
        text = NEW_FILE_HEADER + entry_text(entry, comment, "  ")
        return ("\n" if old_text and not old_text.endswith("\n") else "") + text, 0, None
    try:
        old = read_waivers(path)
    except WaiverFileError as exc:
        return str(exc)
    same = next((w for w in old.entries if _same_scope(w, new)), None)
    if same is not None:
        return "", same.index, same.index
    separator = "" if old_text.endswith("\n") else "\n"
    for heading in ("", "waivers:\n"):
        for indent in _ITEM_INDENTS:
            addition = separator + heading + entry_text(entry, comment, indent)
            try:
                after = read_waivers_text(old_text + addition, path)
            except WaiverFileError:
                continue
            if len(after.entries) == len(old.entries) + 1 and after.entries[:-1] == old.entries \
                    and _same_scope(after.entries[-1], new) and after.entries[-1].reason == new.reason:
                return addition, len(old.entries), None
    return (f"{path}: cannot append a waiver: its `waivers:` list is not the last block of the file, or not "
            "written one item per line; add the entry by hand (docs/waivers.md)")


def _same_scope(a: Any, b: Any) -> bool:
    return (a.invariant, a.relation, a.api, a.variable, a.first_step, a.last_step) == \
        (b.invariant, b.relation, b.api, b.variable, b.first_step, b.last_step)


def run_waive(args: argparse.Namespace) -> int:
    made = _entry(args)
    if isinstance(made, str):
        return fail(made)
    entry, comment = made
    problem = _entry_problem(entry)
    if problem:
        return fail(problem)
    planned = _addition(args.file, entry, comment)
    if isinstance(planned, str):
        return fail(planned)
    addition, index, existing = planned
    if existing is not None:
        write_line(sys.stdout, f"already waived by waivers[{existing}] of {args.file}; nothing added")
        return 0
    try:
        with open(args.file, "a", encoding="utf-8") as handle:
            handle.write(addition)
    except OSError as exc:
        return fail(f"{args.file}: cannot write: {exc.strerror or exc}")
    what = f"invariant {entry['id']}" if "id" in entry else "violations of " + ", ".join(
        f"{key} {entry[key]}" for key in ("relation", "api", "variable") if key in entry)
    write_line(sys.stdout, f"waived {what} -> {args.file} (waivers[{index}])")
    return 0
