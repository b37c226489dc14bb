"""Bad input, one table: every malformed, empty, truncated, wrong-version or hostile file or
value the product reads, and what it gets.

The CLI must exit 2 with one ``traincheck: error:`` line naming the file and the problem; the
agent must warn naming the file (or variable) and the problem, leave out only what is broken,
and let the training finish with the losses of a plain run. docs/bad_input.md shows the same
table (``test_the_doc_lists_every_case`` keeps the two in step).

Agent cases share training runs: all bad invariants files and bad check-mode values go into one
check run next to a good invariants file (whose violations must still be found), all bad policy
files into one collect run next to a good policy (which must still apply).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import MLP, agent_env, plain_losses, read_traces, run_here, run_python
from traincheck_agent.inference.invariant import MAX_FILE_BYTES
from traincheck_agent.policy.loader import MAX_POLICY_BYTES

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "bad_input.md"
STEPS = ("--steps", "3")
BUGGY = (*STEPS, "--bug", "no-zero-grad")  # violates invariants learned from a clean run
CLI_TIMEOUT_S = 30
HOSTILE_LIMIT_S = 10  # a hostile file must be refused quickly, not parsed at length


@dataclass(frozen=True)
class Case:
    """One bad input. ``make(tmp, ref)`` writes it and returns the path (or env value) to pass."""

    id: str
    kind: str  # "invariants" | "trace" | "violations" | "waivers" | "references" | "policy" | "env"
    input: str  # what the input is, for the doc
    make: Callable[[Path, dict], str]
    problem: str  # text the message must contain, besides the file's name
    cli_gets: str = ""  # for the doc; "" = the CLI does not read this input
    agent_gets: str = ""  # for the doc; "" = the agent does not read this input
    env: str = ""  # the variable, for env cases


# ----------------------------------------------------------------------- writing bad inputs


def _write(tmp: Path, name: str, data: bytes | str) -> str:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return str(path)


def _sparse(tmp: Path, name: str, size: int) -> str:
    """A file of ``size`` bytes written in no time: the limits are checked before reading, so a
    sparse file tests them exactly without putting 200 MB on disk."""
    path = tmp / name
    with path.open("wb") as handle:
        handle.truncate(size)
    return str(path)


def _inv_text(ref: dict, change: Callable[[dict], None] | None = None) -> str:
    doc = json.loads(ref["inv"].read_text())
    if change is not None:
        change(doc)
    return json.dumps(doc, indent=1)


def _inv(name: str, change: Callable[[dict], None] | None = None, text: Callable[[str], str] | None = None):
    def make(tmp: Path, ref: dict) -> str:
        body = _inv_text(ref, change)
        return _write(tmp, f"inv/{name}.json", text(body) if text else body)
    return make


def _first(change: Callable[[dict], None]) -> Callable[[dict], None]:
    return lambda doc: change(doc["invariants"][0])


def _raw(name: str, data: bytes | str, folder: str = "inv"):
    return lambda tmp, ref: _write(tmp, f"{folder}/{name}", data)


def _trace(name: str, body: Callable[[list[bytes]], bytes]):
    """A directory holding one trace file whose bytes are ``body(lines of a real trace)``."""
    def make(tmp: Path, ref: dict) -> str:
        _write(tmp, f"traces/{name}/trace_bad_rank0_pid1.jsonl", body(ref["trace_lines"]))
        return str(tmp / "traces" / name)
    return make


def _inserted(record: bytes) -> Callable[[list[bytes]], bytes]:
    return lambda lines: b"".join(lines[:5]) + record + b"\n" + b"".join(lines[5:])


def _header(change: dict) -> Callable[[list[bytes]], bytes]:
    return lambda lines: json.dumps({**json.loads(lines[0]), **change}).encode() + b"\n" + b"".join(lines[1:])


def _violations(name: str, bad: str):
    """A violations file: a good record on line 1, ``bad`` on line 2, a good one on line 3."""
    good = json.dumps({"rank": 0, "step": 3, "invariant": "inv-1", "relation": "StateTransition",
                       "message": "the data did not change", "variable": "fc1.weight", "ranks": [0, 1],
                       "evidence": {"before": "xxh64:1", "after": "xxh64:1"}})
    return lambda tmp, ref: _write(tmp, f"violations/{name}/violations-0.jsonl", f"{good}\n{bad}\n{good}\n")


def _waivers(name: str, text: str):
    return _raw(f"{name}.yaml", text, "waivers")


def _with_reference(name: str, spoil: Callable[[Path, dict], None]):
    """An invariants file beside a copy of the reference trace it records, then ``spoil(trace
    copy, document)`` (which may delete or change the copy, or edit the document)."""
    def make(tmp: Path, ref: dict) -> str:
        from traincheck_agent.inference.references import describe

        folder = tmp / "references" / name
        folder.mkdir(parents=True)
        trace = folder / ref["trace"].name
        trace.write_bytes(ref["trace"].read_bytes())
        inv = folder / "inv.json"
        doc = json.loads(ref["inv"].read_text())
        doc["references"] = [r.to_json() for r in describe([trace], inv)]
        spoil(trace, doc)
        inv.write_text(json.dumps(doc, indent=1))
        return str(inv)
    return make


def _policy(name: str, text: str | bytes):
    return _raw(f"{name}.yaml", text, "policies")


def _value(value: str):
    return lambda tmp, ref: value


def _alias_bomb() -> str:
    """Billion laughs: nine levels of nine aliases each, 9**9 strings once expanded."""
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    return "\n".join(lines) + "\napis:\n  - module: torch.nn.functional\n    include: *l8\n"


_PYOBJ = "apis: !!python/object/apply:os.system ['echo pwned']\n"
_CATASTROPHIC_GLOB = "apis:\n  - module: torch.nn.functional\n    include: ['" + "*a" * 60 + "b']\n"
_BAD_RULE = ("apis:\n  - module: torch.nn.functional\n    include: [no_such_function]\n"
             "record_module_calls: false\nsampling: {every: x}\n")

SKIPPED = "warning naming the file and the problem; that file is skipped, the other files are checked"
POLICY_SKIPPED = "warning naming the file and the problem; that file is skipped, other files apply"
_NOT_YES_OR_NO = "is not one of 1, true, yes, on, 0, false, no, off; using 0"
ENTRY_SKIPPED = "warning naming the file, the key and the problem; only that entry is skipped"
CLI_2 = "exit 2, `traincheck: error:` naming the file and the problem"
TRACE_2 = "exit 2 (infer, check, trace summary) naming the file, line and problem"
WAIVERS_CLI = ("`traincheck check --waive`: exit 2, `traincheck: error:` naming the file, the waiver "
               "(`waivers[0]`) and the problem")
WAIVERS_AGENT = "`TRAINCHECK_WAIVE`: warning naming the file, the waiver and the problem; no violation is waived"
REFERENCES_CLI = ("`traincheck infer --update`: exit 2, `traincheck: error:` naming the trace and what to do "
                  "(`--references`); the invariants file is left as it was")
VIOLATIONS_2 = ("`traincheck report`: the report shows the good records; exit 2, one line naming the file, "
                "the line of the first bad record and its problem, and how many were skipped")

CASES: list[Case] = [
    # ------------------------------------------------------------------ invariants files
    Case("inv-empty", "invariants", "empty invariants file", _raw("empty.json", ""),
         "not valid JSON", CLI_2, SKIPPED),
    Case("inv-truncated", "invariants", "invariants file cut in half",
         _inv("truncated", text=lambda t: t[: len(t) // 2]), "not valid JSON", CLI_2, SKIPPED),
    Case("inv-not-json", "invariants", "not JSON (`{not json`)", _raw("notjson.json", "{not json"),
         "line 1: not valid JSON", CLI_2, SKIPPED),
    Case("inv-top-list", "invariants", "JSON, but a list at the top", _raw("list.json", "[]"),
         "not a traincheck invariants file", CLI_2, SKIPPED),
    Case("inv-wrong-format", "invariants", "another JSON document (`format` not ours)",
         _inv("format", lambda d: d.update(format="something-else")), "not a traincheck invariants file",
         CLI_2, SKIPPED),
    Case("inv-version-2", "invariants", "`version: 2` (newer format)", _inv("v2", lambda d: d.update(version=2)),
         "unsupported version 2", CLI_2, SKIPPED),
    Case("inv-version-string", "invariants", "`version: \"1\"` (wrong type)",
         _inv("vstr", lambda d: d.update(version="1")), "unsupported version '1'", CLI_2, SKIPPED),
    Case("inv-no-list", "invariants", "no `invariants` key", _inv("nolist", lambda d: d.pop("invariants")),
         "missing key 'invariants'", CLI_2, SKIPPED),
    Case("inv-entry-string", "invariants", "an entry that is a string",
         _inv("entry", lambda d: d.update(invariants=["x"])), "invariants[0]: expected an object", CLI_2, SKIPPED),
    Case("inv-subject-list", "invariants", "`subject` of the wrong type",
         _inv("subjlist", _first(lambda e: e.update(subject=[]))), "'subject' should be dict", CLI_2, SKIPPED),
    Case("inv-unknown-relation", "invariants", "an unknown relation",
         _inv("unknownrel", _first(lambda e: e.update(relation="Telepathy"))),
         "invariants[0]: unknown relation 'Telepathy'", CLI_2, SKIPPED),
    Case("inv-subject-fields", "invariants", "a subject missing the fields its relation reads",
         _inv("subjfields", _first(lambda e: e.update(subject={"api": "torch.nn.Linear.forward"}))),
         "ConsistentOutput subject lacks property, value", CLI_2, SKIPPED),
    Case("inv-clause-kind", "invariants", "a precondition clause of an unknown kind",
         _inv("clause", _first(lambda e: e.update(precondition=[{"kind": "LIKE", "field": "a", "value": 1}]))),
         "unknown clause kind 'LIKE'", CLI_2, SKIPPED),
    Case("inv-support-type", "invariants", "`support` of the wrong type",
         _inv("support", _first(lambda e: e.update(support="many"))), "invariants[0]: malformed", CLI_2, SKIPPED),
    Case("inv-non-utf8", "invariants", "non-UTF-8 bytes", _raw("latin1.json", b'{"format": "caf\xe9"}'),
         "not UTF-8 text", CLI_2, SKIPPED),
    Case("inv-binary", "invariants", "binary garbage", _raw("garbage.json", bytes(range(256)) * 16),
         "not UTF-8 text", CLI_2, SKIPPED),
    Case("inv-bom", "invariants", "a UTF-8 byte-order mark before the JSON",
         _inv("bom", text=lambda t: "\ufeff" + t), "Unexpected UTF-8 BOM", CLI_2, SKIPPED),
    Case("inv-1e999", "invariants", "a number that overflows (`1e999`)",
         _inv("huge_number", text=lambda t: t.replace('"version": 1', '"version": 1, "x": 1e999', 1)),
         "number 1e999 is out of range", CLI_2, SKIPPED),
    Case("inv-nan", "invariants", "`NaN` as a value",
         _inv("nan", text=lambda t: t.replace('"version": 1', '"version": 1, "x": NaN', 1)),
         "NaN is not allowed", CLI_2, SKIPPED),
    Case("inv-duplicate-key", "invariants", "a duplicate key",
         _inv("dup", text=lambda t: t.replace('"version": 1', '"version": 1, "version": 1', 1)),
         "duplicate key 'version'", CLI_2, SKIPPED),
    Case("inv-big-integer", "invariants", "an integer of 5000 digits",
         _inv("bigint", text=lambda t: t.replace('"version": 1', '"version": 1, "x": ' + "9" * 5000, 1)),
         "Exceeds the limit (4300 digits)", CLI_2, SKIPPED),
    Case("inv-deep-nesting", "invariants", "200 000 nested arrays (recursion)",
         _raw("deep.json", "[" * 200_000 + "]" * 200_000), "nested too deeply", CLI_2, SKIPPED),
    Case("inv-deep-subject", "invariants", "a subject nested 100 levels deep",
         _inv("deepsubject", _first(lambda e: e["subject"].update(value=json.loads("[" * 100 + "]" * 100)))),
         "subject nested deeper than 32 levels", CLI_2, SKIPPED),
    Case("inv-200mb", "invariants", "a 200 MB file", lambda tmp, ref: _sparse(tmp, "inv/huge.json", 200 << 20),
         f"over the {MAX_FILE_BYTES} byte limit", CLI_2, SKIPPED),
    Case("inv-dev-zero", "invariants", "`/dev/zero` (endless, reports size 0)", _value("/dev/zero"),
         "not a regular file", CLI_2, SKIPPED),
    Case("inv-missing", "invariants", "a path that does not exist",
         lambda tmp, ref: str(tmp / "inv" / "missing.json"), "cannot be read: No such file or directory",
         CLI_2, SKIPPED),
    Case("inv-directory", "invariants", "a directory", lambda tmp, ref: str(tmp), "cannot be read: Is a directory",
         CLI_2, SKIPPED),
    # ------------------------------------------------------------------ trace files (CLI only)
    Case("trace-empty", "trace", "an empty trace file (process killed before its first write)",
         _trace("empty", lambda lines: b""), "empty file: no header line",
         "warning naming the file, which is skipped; exit 2 when no readable trace is left"),
    Case("trace-torn-header", "trace", "a torn header line", _trace("tornheader", lambda lines: lines[0][:40]),
         "torn header line", "warning naming the file, which is skipped; exit 2 when no readable trace is left"),
    Case("trace-not-json", "trace", "not JSON", _trace("notjson", lambda lines: b"hello\n" + b"".join(lines[1:])),
         "1: header line is not valid JSON", TRACE_2),
    Case("trace-schema-99", "trace", "a newer schema version", _trace("schema99", _header({"schema": 99})),
         "schema 99 is newer than this reader supports", TRACE_2),
    Case("trace-schema-string", "trace", "schema of the wrong type", _trace("schemastr", _header({"schema": "1"})),
         "header has no valid schema ('1')", TRACE_2),
    Case("trace-no-header", "trace", "records without the header line",
         _trace("noheader", lambda lines: b"".join(lines[1:])), "first record is not a header", TRACE_2),
    Case("trace-binary", "trace", "binary garbage", _trace("binary", lambda lines: bytes(range(1, 256)) * 32),
         "header line is not valid JSON", TRACE_2),
    Case("trace-bad-middle-line", "trace", "a damaged line in the middle", _trace("middle", _inserted(b"{oops")),
         "6: line is not valid JSON", TRACE_2),
    Case("trace-record-api-type", "trace", "a call record whose `api` is a number",
         _trace("apitype", _inserted(b'{"kind": "call", "api": 5, "step": 0, "args": 3}')),
         "6: line is a call record whose 'api' is int, not str", TRACE_2),
    Case("trace-record-no-kind", "trace", "a record without a kind",
         _trace("nokind", _inserted(b'{"api": "torch.add"}')), "6: line is a record without a kind", TRACE_2),
    Case("trace-record-types", "trace", "a record with fields of the wrong type",
         _trace("types", _inserted(b'{"kind": "state", "var": "w", "step": "x", "attrs": 7}')),
         "6: line is a state record whose 'step' is str, not int", TRACE_2),
    Case("trace-deep-line", "trace", "a line nested 5000 levels deep",
         _trace("deep", _inserted(b'{"kind": "note", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}")),
         "6: line is not valid JSON (depth limit exceeded", TRACE_2),
    Case("trace-no-traces", "trace", "a directory with no trace files",
         lambda tmp, ref: str(Path(_write(tmp, "traces/none/readme.txt", "x")).parent), "no trace files",
         "exit 2 naming the directory"),
    Case("trace-missing", "trace", "a path that does not exist", lambda tmp, ref: str(tmp / "traces" / "nowhere"),
         "no such file or directory", "exit 2 naming the path"),
    Case("trace-fifo", "trace", "a FIFO given as a trace file",
         lambda tmp, ref: (os.mkfifo(tmp / "fifo.jsonl"), str(tmp / "fifo.jsonl"))[1],
         "not a regular file or directory", "exit 2 naming the path (not waited on)"),
    # ------------------------------------------------------------------ violations files (report)
    Case("violations-ranks-number", "violations", "a record whose `ranks` is a number (`\"ranks\": 5`)",
         _violations("ranks", '{"invariant": "inv-1", "ranks": 5}'), "2: `ranks` is not a list of integers",
         VIOLATIONS_2),
    Case("violations-variable-list", "violations", "a record whose `variable` is a list",
         _violations("variable", '{"invariant": "inv-1", "variable": ["x"]}'), "2: `variable` is not a string",
         VIOLATIONS_2),
    Case("violations-invariant-object", "violations", "a record whose `invariant` is an object",
         _violations("invariant", '{"invariant": {"id": 1}}'), "2: `invariant` is not a string", VIOLATIONS_2),
    Case("violations-message-object", "violations", "a record whose `message` is an object",
         _violations("message", '{"invariant": "inv-1", "message": {"text": "x"}}'), "2: `message` is not a string",
         VIOLATIONS_2),
    Case("violations-deep-evidence", "violations", "a record whose `evidence` nests 1000 levels",
         _violations("deep", '{"invariant": "inv-1", "evidence": ' + '{"a": ' * 1000 + "1" + "}" * 1000 + "}"),
         "2: nested more than 32 levels", VIOLATIONS_2),
    Case("violations-not-object", "violations", "a line that is JSON but not an object",
         _violations("list", "[1, 2]"), "2: not a JSON object", VIOLATIONS_2),
    # ------------------------------------------------------------------ waivers files (check)
    Case("waive-empty", "waivers", "an empty waivers file", _waivers("empty", ""), "the file is empty",
         WAIVERS_CLI, WAIVERS_AGENT),
    Case("waive-not-yaml", "waivers", "not YAML (an unclosed bracket)", _waivers("notyaml", "waivers: [\n"),
         "not valid YAML", WAIVERS_CLI, WAIVERS_AGENT),
    Case("waive-alias", "waivers", "a YAML alias", _waivers("alias", "a: &a [1]\nversion: 1\nwaivers: *a\n"),
         "anchors and aliases (&name, *name) are not allowed", WAIVERS_CLI, WAIVERS_AGENT),
    Case("waive-version-2", "waivers", "`version: 2`", _waivers("v2", "version: 2\nwaivers: []\n"),
         "version: unsupported version 2", WAIVERS_CLI, WAIVERS_AGENT),
    Case("waive-unknown-key", "waivers", "an unknown top-level key",
         _waivers("key", "version: 1\nwaivers: []\nextra: 1\n"), "extra: unknown key", WAIVERS_CLI, WAIVERS_AGENT),
    Case("waive-no-reason", "waivers", "a waiver without a reason",
         _waivers("noreason", "version: 1\nwaivers:\n  - id: sc-0123456789ab\n"),
         "waivers[0]: missing reason", WAIVERS_CLI, WAIVERS_AGENT),
    Case("waive-bad-id", "waivers", "an id that is not an invariant id",
         _waivers("badid", "version: 1\nwaivers:\n  - id: nope\n    reason: fine\n"),
         "waivers[0].id: not an invariant id", WAIVERS_CLI, WAIVERS_AGENT),
    Case("waive-unknown-relation", "waivers", "a relation that does not exist",
         _waivers("relation", "version: 1\nwaivers:\n  - relation: NoSuch\n    api: x\n    reason: r\n"),
         "waivers[0].relation: unknown relation 'NoSuch'", WAIVERS_CLI, WAIVERS_AGENT),
    Case("waive-backward-steps", "waivers", "a step range that ends before it starts (`200-100`)",
         _waivers("steps", "version: 1\nwaivers:\n  - id: sc-0123456789ab\n    reason: r\n    steps: 200-100\n"),
         "the range ends before it starts (200-100)", WAIVERS_CLI, WAIVERS_AGENT),
    # ------------------------------------------------------------------ recorded references (infer --update)
    Case("ref-missing", "references", "a reference trace that was deleted",
         _with_reference("missing", lambda trace, doc: trace.unlink()), "is missing", REFERENCES_CLI),
    Case("ref-changed", "references", "a reference trace appended to since",
         _with_reference("changed", lambda trace, doc: trace.write_bytes(trace.read_bytes() + b"\n")),
         "has changed since the invariants were learned", REFERENCES_CLI),
    Case("ref-unrecorded", "references", "a file written before references were recorded",
         _with_reference("unrecorded", lambda trace, doc: doc.pop("references")), "--references", REFERENCES_CLI),
    # ------------------------------------------------------------------ policies (agent only)
    Case("policy-not-yaml", "policy", "not YAML (an unclosed bracket)", _policy("notyaml", "apis: [\n"),
         "not valid YAML", "", POLICY_SKIPPED),
    Case("policy-top-list", "policy", "a list at the top level", _policy("toplist", "- a\n- b\n"),
         "expected a mapping at the top level, got list", "", POLICY_SKIPPED),
    Case("policy-unknown-key", "policy", "an unknown top-level key", _policy("unknownkey", "colour: red\n"),
         "colour: unknown key", "", ENTRY_SKIPPED),
    Case("policy-non-string-keys", "policy", "keys that are not strings (`1:`, `~:`)",
         _policy("intkeys", "1: x\n~: y\ncolour: red\n"), "1: unknown key", "", ENTRY_SKIPPED),
    Case("policy-rule-key", "policy", "an unknown key in an API rule",
         _policy("rulekey", "apis:\n  - module: torch.nn.functional\n    include: [dropout]\n    colour: red\n"),
         "apis[0].colour: unknown key", "", ENTRY_SKIPPED),
    Case("policy-wrong-type", "policy", "`apis: 5` (wrong type)", _policy("wrongtype", "apis: 5\n"),
         "apis: expected a list of rules", "", ENTRY_SKIPPED),
    Case("policy-bad-entry", "policy", "one bad entry next to good ones in the same file",
         _policy("badentry", _BAD_RULE), "sampling.every: expected an integer >= 1, got 'x'", "",
         ENTRY_SKIPPED + "; the file's good entries apply"),
    Case("policy-infinity", "policy", "`every: .inf`", _policy("inf", "sampling: {every: .inf}\n"),
         "sampling.every: expected an integer >= 1, got inf", "", ENTRY_SKIPPED),
    Case("policy-version-2", "policy", "`version: 2`", _policy("v2", "version: 2\n"), "unsupported version 2",
         "", POLICY_SKIPPED),
    Case("policy-alias-bomb", "policy", "YAML alias bomb (billion laughs)", _policy("bomb", _alias_bomb()),
         "anchors and aliases (&name, *name) are not allowed", "", POLICY_SKIPPED),
    Case("policy-python-object", "policy", "a `!!python/object` tag", _policy("pyobj", _PYOBJ),
         "could not determine a constructor", "", POLICY_SKIPPED + " (nothing is executed)"),
    Case("policy-duplicate-key", "policy", "a duplicate key",
         _policy("dup", "sampling: {every: 2}\nsampling: {every: 3}\n"), "duplicate key 'sampling'", "",
         POLICY_SKIPPED),
    Case("policy-two-documents", "policy", "two YAML documents", _policy("twodocs", "name: a\n---\nname: b\n"),
         "expected a single document", "", POLICY_SKIPPED),
    Case("policy-deep-nesting", "policy", "100 000 nested flow lists",
         _policy("deep", "[" * 100_000 + "]" * 100_000), "not valid YAML", "", POLICY_SKIPPED),
    Case("policy-non-utf8", "policy", "non-UTF-8 bytes", _policy("latin1", b"name: caf\xe9\n"), "not UTF-8 text",
         "", POLICY_SKIPPED),
    Case("policy-200mb", "policy", "a 200 MB file", lambda tmp, ref: _sparse(tmp, "policies/huge.yaml", 200 << 20),
         f"over the {MAX_POLICY_BYTES} byte limit", "", POLICY_SKIPPED),
    Case("policy-dev-zero", "policy", "`/dev/zero`", _value("/dev/zero"), "not a regular file", "", POLICY_SKIPPED),
    Case("policy-missing", "policy", "a path that does not exist", lambda tmp, ref: str(tmp / "nope.yaml"),
         "cannot be read: No such file or directory", "", POLICY_SKIPPED),
    Case("policy-directory", "policy", "a directory", lambda tmp, ref: str(tmp / "inv"),
         "cannot be read: Is a directory", "", POLICY_SKIPPED),
    Case("policy-no-such-api", "policy", "an API that does not exist",
         _policy("noapi", "apis:\n  - module: torch.nn.functional\n    include: [no_such_function]\n"),
         "torch.nn.functional.no_such_function does not exist; skipped", "",
         "warning when the module is imported; the rule's other names are wrapped"),
    Case("policy-catastrophic-glob", "policy", "a glob that backtracks catastrophically as a naive regex "
         "(`*a*a…*a b`, 60 stars)", _policy("glob", _CATASTROPHIC_GLOB), "", "",
         "accepted: globs compile to linear-time regexes; matches nothing, training unaffected"),
    # ------------------------------------------------------------------ environment values (agent only)
    Case("env-flush-interval", "env", "`TRAINCHECK_FLUSH_INTERVAL=abc`", _value("abc"), "is not a number; using 0.5",
         "", "warning naming the variable; the default is used", env="TRAINCHECK_FLUSH_INTERVAL"),
    Case("env-flush-records", "env", "`TRAINCHECK_FLUSH_RECORDS=-5`", _value("-5"), "is below 1; using 2000",
         "", "warning naming the variable; the default is used", env="TRAINCHECK_FLUSH_RECORDS"),
    Case("env-action", "env", "`TRAINCHECK_ACTION=explode`", _value("explode"),
         "is not one of log, raise, abort; using log", "", "warning; violations are logged",
         env="TRAINCHECK_ACTION"),
    Case("env-checker", "env", "`TRAINCHECK_CHECKER=x`", _value("x"), "is not one of auto, process, thread",
         "", "warning; auto is used", env="TRAINCHECK_CHECKER"),
    Case("env-check-trace", "env", "`TRAINCHECK_CHECK_TRACE=maybe`", _value("maybe"), _NOT_YES_OR_NO,
         "", "warning; no trace is written", env="TRAINCHECK_CHECK_TRACE"),
    Case("env-no-default-policies", "env", "`TRAINCHECK_NO_DEFAULT_POLICIES=sometimes`", _value("sometimes"),
         _NOT_YES_OR_NO, "", "warning; the default policies are loaded", env="TRAINCHECK_NO_DEFAULT_POLICIES"),
    Case("env-debug", "env", "`TRAINCHECK_DEBUG=maybe`", _value("maybe"), _NOT_YES_OR_NO, "",
         "warning; no debug lines", env="TRAINCHECK_DEBUG"),
]
# Numbers that parse but are not finite: a warning and the default, like any other bad number.
# Run by test_non_finite_env_values_fall_back_to_the_default.
NON_FINITE_ENV = [("TRAINCHECK_FLUSH_RECORDS", "1e999"), ("TRAINCHECK_FLUSH_INTERVAL", "inf"),
                  ("TRAINCHECK_FLUSH_INTERVAL", "nan")]

BY_KIND = {kind: [c for c in CASES if c.kind == kind]
           for kind in ("invariants", "trace", "violations", "waivers", "references", "policy", "env")}


# ----------------------------------------------------------------------- runs


def _losses(stdout: str) -> list[float]:
    return json.loads(stdout.strip().splitlines()[-1])["losses"]


def _traincheck(*args: object) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "traincheck_agent", *map(str, args)], capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return proc, time.perf_counter() - started


@pytest.fixture(scope="module")
def ref(tmp_path_factory) -> dict:
    """A clean trace, the invariants learned from it, and the losses of plain runs."""
    root = tmp_path_factory.mktemp("ref")
    collect = run_python([MLP, *STEPS], agent_env("collect", root / "clean"))
    assert collect.returncode == 0, collect.stderr
    inv = root / "inv.json"
    proc, _ = _traincheck("infer", root / "clean", "-o", inv)
    assert proc.returncode == 0, proc.stderr
    [trace] = list((root / "clean").glob("trace_*.jsonl"))
    return {"root": root, "inv": inv, "trace": trace, "trace_lines": trace.read_bytes().splitlines(keepends=True),
            "losses": plain_losses(*STEPS), "buggy_losses": plain_losses(*BUGGY),
            "collect_losses": _losses(collect.stdout)}


@pytest.fixture(scope="module")
def made(ref, tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("bad")
    return {case.id: case.make(tmp, ref) for case in CASES}


_GOOD_POLICY = "record_module_calls: false\n"


@pytest.fixture(scope="module")
def agent_runs(ref, made, tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """Two training runs under the agent, in parallel: check mode with every bad invariants file
    and bad check-mode value next to the good invariants file; collect mode with every bad
    policy next to a good one."""
    tmp = tmp_path_factory.mktemp("agent")
    bad_inv = [made[c.id] for c in BY_KIND["invariants"]]
    check_env = agent_env("check", tmp / "check", TRAINCHECK_INV=os.pathsep.join([str(ref["inv"]), *bad_inv]),
                          **{c.env: made[c.id] for c in BY_KIND["env"]})
    good = _write(tmp, "good.yaml", _GOOD_POLICY)
    policies = [made[c.id] for c in BY_KIND["policy"]] + [good]
    collect_env = agent_env("collect", tmp / "collect", TRAINCHECK_POLICY=os.pathsep.join(policies))
    jobs = {"check": ([MLP, *BUGGY], check_env, tmp / "check"), "collect": ([MLP, *STEPS], collect_env, tmp / "collect")}
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda job: run_python(job[0], job[1], timeout=120), jobs.values()))
    return {name: (proc, job[2]) for (name, job), proc in zip(jobs.items(), procs, strict=True)}


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("[traincheck] warning: ")]


# ----------------------------------------------------------------------- the CLI


@pytest.mark.slow
@pytest.mark.parametrize("case", BY_KIND["invariants"], ids=lambda c: c.id)
def test_cli_refuses_a_bad_invariants_file(case, ref, made):
    path = made[case.id]
    for args in (["check", ref["trace"], "-i", ref["inv"], "-i", path, "--out", ref["root"] / "out"],
                 ["invariants", "show", path]):
        proc, took = _traincheck(*args)
        assert proc.returncode == 2, proc.stderr
        [line] = proc.stderr.splitlines()
        assert line.startswith(f"traincheck: error: {path}: ") and case.problem in line
        assert took < HOSTILE_LIMIT_S


@pytest.mark.slow
@pytest.mark.parametrize("case", BY_KIND["trace"], ids=lambda c: c.id)
def test_cli_refuses_a_bad_trace(case, ref, made):
    path = made[case.id]
    trace_file = next(Path(path).glob("trace_*.jsonl"), None) if Path(path).is_dir() else None
    named = str(trace_file) if trace_file is not None else path
    for args in (["infer", path, "-o", ref["root"] / "never.json"],
                 ["check", path, "-i", ref["inv"], "--out", ref["root"] / "out"],
                 ["trace", "summary", path]):
        proc, took = _traincheck(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and proc.stderr.splitlines()[-1].startswith("traincheck: error: ")
        assert named in proc.stderr and case.problem in proc.stderr, proc.stderr
        assert took < HOSTILE_LIMIT_S
    assert not (ref["root"] / "never.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("case", BY_KIND["violations"], ids=lambda c: c.id)
def test_report_skips_a_bad_violation_record_naming_it(case, tmp_path):
    """The report is written from the good records; one line names the first bad one, exit 2."""
    path = case.make(tmp_path, {})
    report = tmp_path / "report.html"
    proc, took = _traincheck("report", path, "-o", report)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line == f"traincheck: error: {path}:{case.problem} (1 bad record(s) skipped, the first shown)"
    assert "1 violation (2 records)" in proc.stdout and report.is_file()
    assert took < HOSTILE_LIMIT_S


@pytest.mark.slow
@pytest.mark.parametrize("case", BY_KIND["waivers"], ids=lambda c: c.id)
def test_check_refuses_a_bad_waivers_file(case, ref, made):
    path = made[case.id]
    proc, took = _traincheck("check", ref["trace"], "-i", ref["inv"], "--waive", path, "--out", ref["root"] / "out")
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"traincheck: error: {path}: ") and case.problem in line, line
    assert took < HOSTILE_LIMIT_S


@pytest.mark.slow
@pytest.mark.parametrize("case", BY_KIND["references"], ids=lambda c: c.id)
def test_infer_update_refuses_references_it_cannot_use(case, ref, made):
    path = Path(made[case.id])
    before = path.read_bytes()
    proc, _ = _traincheck("infer", "--update", path, ref["trace"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("traincheck: error: ") and case.problem in line and "--references" in line, line
    assert path.read_bytes() == before


@pytest.mark.slow
def test_an_empty_trace_next_to_good_ones_is_skipped_not_fatal(ref, made):
    out = ref["root"] / "with_empty.json"
    proc, _ = _traincheck("infer", ref["trace"], made["trace-empty"], "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert f"{made['trace-empty']}/trace_bad_rank0_pid1.jsonl:1: empty file: no header line; file skipped" in proc.stderr
    assert json.loads(out.read_text())["invariants"] == json.loads(ref["inv"].read_text())["invariants"]


@pytest.mark.slow
def test_cli_refuses_an_unwritable_output(ref):
    proc, _ = _traincheck("infer", ref["trace"], "-o", ref["root"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"traincheck: error: {ref['root']}: cannot write the invariants file: Is a directory"


# ----------------------------------------------------------------------- the agent


@pytest.mark.slow
def test_check_run_skips_only_the_bad_invariants_files_and_values(ref, made, agent_runs):
    proc, out = agent_runs["check"]
    assert proc.returncode == 0, proc.stderr
    assert _losses(proc.stdout) == ref["buggy_losses"]
    violations = [v for line in (out / "violations-0.jsonl").read_text().splitlines()
                  if (v := json.loads(line)).get("event") != "coverage"]
    good_ids = {inv["id"] for inv in json.loads(ref["inv"].read_text())["invariants"]}
    assert violations and {v["invariant"] for v in violations} <= good_ids  # the good file is still checked
    assert "Traceback" not in proc.stderr
    assert "[traincheck] debug:" not in proc.stderr  # TRAINCHECK_DEBUG=maybe is no


@pytest.mark.slow
@pytest.mark.parametrize("case", BY_KIND["invariants"], ids=lambda c: c.id)
def test_agent_skips_a_bad_invariants_file_naming_it(case, made, agent_runs):
    warnings = _warnings(agent_runs["check"][0].stderr)
    mine = [w for w in warnings if w.startswith(f"[traincheck] warning: invariants file {made[case.id]}: ")]
    assert len(mine) == 1 and case.problem in mine[0] and mine[0].endswith("; this file is skipped"), warnings


@pytest.mark.slow
@pytest.mark.parametrize("case", BY_KIND["waivers"], ids=lambda c: c.id)
def test_check_mode_warns_about_a_bad_waivers_file_and_waives_nothing(case, made, capsys):
    from traincheck_agent.agent.checking.check_mode import load_waivers

    assert load_waivers(Path(made[case.id])) is None
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"[traincheck] warning: waivers file {made[case.id]}: ") and case.problem in line
    assert line.endswith("; no violation is waived")


@pytest.mark.slow
def test_a_check_run_with_a_bad_waivers_file_reports_every_violation(ref, made, tmp_path):
    proc = run_python([MLP, *BUGGY], agent_env("check", tmp_path, TRAINCHECK_INV=str(ref["inv"]),
                                               TRAINCHECK_WAIVE=made["waive-no-reason"]))
    assert proc.returncode == 0 and _losses(proc.stdout) == ref["buggy_losses"], proc.stderr
    assert [w for w in _warnings(proc.stderr) if "waivers file" in w and "missing reason" in w]
    violations = [json.loads(line) for line in (tmp_path / "violations-0.jsonl").read_text().splitlines()]
    found = [v for v in violations if "event" not in v]
    assert found and not [v for v in found if v.get("waived")]


@pytest.mark.slow
@pytest.mark.parametrize("case", BY_KIND["env"], ids=lambda c: c.id)
def test_agent_warns_about_a_bad_value_and_uses_the_default(case, made, agent_runs):
    warnings = _warnings(agent_runs["check"][0].stderr)
    mine = [w for w in warnings if w.startswith(f"[traincheck] warning: {case.env}={made[case.id]!r} ")]
    assert len(mine) == 1 and case.problem in mine[0], warnings


@pytest.mark.slow
def test_collect_run_keeps_the_good_policies(ref, agent_runs):
    proc, out = agent_runs["collect"]
    assert proc.returncode == 0, proc.stderr
    assert _losses(proc.stdout) == ref["losses"] == ref["collect_losses"]
    [trace] = read_traces(out)
    assert trace.calls()  # the default policies still apply
    # record_module_calls: false, from the good file and from the file with one bad entry
    assert not [c for c in trace.calls() if c["api"].startswith("torch.nn.modules.")]
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("case", BY_KIND["policy"], ids=lambda c: c.id)
def test_agent_reports_a_bad_policy_naming_it(case, made, agent_runs):
    warnings = _warnings(agent_runs["collect"][0].stderr)
    mine = [w for w in warnings if w.startswith(f"[traincheck] warning: policy {made[case.id]}: ")]
    if not case.problem:  # accepted as written
        assert mine == []
        return
    assert mine and any(case.problem in w for w in mine), warnings
    assert all(len(w) < 600 for w in mine)  # however large the value, the message stays short


@pytest.mark.slow
def test_policy_files_are_refused_quickly(made):
    from traincheck_agent.policy import load_policies

    hostile = [Path(made[c]) for c in ("policy-alias-bomb", "policy-deep-nesting", "policy-200mb", "policy-dev-zero")]
    started = time.perf_counter()
    _, problems = load_policies(hostile)
    assert time.perf_counter() - started < 2 and len(problems) == len(hostile)


@pytest.mark.slow
@pytest.mark.parametrize(("variable", "value"), NON_FINITE_ENV)
def test_non_finite_env_values_fall_back_to_the_default(variable, value, tmp_path, ref):
    printed, errors = run_here(MLP, *STEPS, mode="collect", out=tmp_path, **{variable: value})
    assert _losses(printed) == ref["losses"]
    assert f"[traincheck] warning: {variable}={value!r} is not a finite number" in errors
    assert list(tmp_path.glob("trace_*.jsonl"))


# ----------------------------------------------------------------------- the doc


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else "—"


def doc_rows() -> list[str]:
    """The table of docs/bad_input.md, one row per case."""
    rows = ["| case | input | CLI gets | agent gets |", "|---|---|---|---|"]
    labels = {"invariants": "invariants file", "trace": "trace", "violations": "violations file",
              "waivers": "waivers file", "references": "invariants file's references", "policy": "policy",
              "env": "environment"}
    for case in CASES:
        rows.append(f"| `{case.id}` | {labels[case.kind]}: {_cell(case.input)} | {_cell(case.cli_gets)} "
                    f"| {_cell(case.agent_gets)} |")
    return rows


def test_the_doc_lists_every_case():
    text = DOC.read_text()
    missing = [row for row in doc_rows() if row not in text.splitlines()]
    assert not missing, "docs/bad_input.md is out of step; rewrite its table with:\n" + "\n".join(doc_rows())


if __name__ == "__main__":  # print the doc table
    print("\n".join(doc_rows()))
