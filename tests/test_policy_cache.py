"""The parsed-policy cache: the same policy from a stored entry as from parsing, PyYAML left
unimported on a hit, private files, and nothing trusted or stored that should not be."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from traincheck_agent.policy import load_policies
from traincheck_agent.policy.loader import default_policy_files
from traincheck_agent.policy.parse_cache import default_cache_dir, parse_cached


def _counting_parse(result: object):
    calls: list[bytes] = []

    def parse(data: bytes) -> object:
        calls.append(data)
        return result

    return parse, calls


def _entries(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / "policies").glob("*.json"))


def test_a_stored_document_is_read_back_instead_of_parsed(tmp_path):
    doc = {"version": 1, "apis": [{"module": "torch.optim", "include": ["*"]}], "ratio": 0.5}
    parse, calls = _counting_parse(doc)
    assert parse_cached(b"text one", parse, tmp_path) == doc
    assert parse_cached(b"text one", parse, tmp_path) == doc
    assert len(calls) == 1
    assert parse_cached(b"text two", parse, tmp_path) == doc  # other bytes: parsed again
    assert len(calls) == 2
    assert len(_entries(tmp_path)) == 2


@pytest.mark.slow
def test_cached_policies_equal_parsed_ones_and_skip_pyyaml(tmp_path):
    files = default_policy_files()
    parsed, problems = load_policies(files)
    assert problems == []
    first, _ = load_policies(files, cache_dir=tmp_path)
    assert len(_entries(tmp_path)) == len(files)
    cached, problems = load_policies(files, cache_dir=tmp_path)
    assert problems == []
    for policy in (first, cached):
        assert policy == parsed
        assert (policy.digest, policy.sources) == (parsed.digest, parsed.sources)
    probe = ("import sys\nfrom pathlib import Path\n"
             "from traincheck_agent.policy.loader import default_policy_files, load_policies\n"
             f"policy, problems = load_policies(default_policy_files(), cache_dir=Path({str(tmp_path)!r}))\n"
             "print(problems == [], 'yaml' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False"]


@pytest.mark.slow
def test_entries_are_private_whatever_the_umask(tmp_path):
    cache = tmp_path / "cache"
    probe = ("import os\nos.umask(0)\nfrom pathlib import Path\n"
             "from traincheck_agent.policy.parse_cache import parse_cached\n"
             f"parse_cached(b'x', lambda data: {{'a': 1}}, Path({str(cache)!r}))")
    subprocess.run([sys.executable, "-c", probe], check=True)
    [entry] = _entries(cache)
    assert stat.S_IMODE((cache / "policies").stat().st_mode) == 0o700
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert [p.name for p in (cache / "policies").iterdir()] == [entry.name]  # no partial file left


@pytest.mark.slow
def test_missing_parents_are_not_world_writable_under_umask_000(tmp_path):
    """A cache under a home without ~/.cache, or under the output directory, creates the
    directories on the way like the output directory: never writable by others."""
    home, out = tmp_path / "home", tmp_path / "out"
    home.mkdir()
    probe = ("import os\nos.umask(0)\nfrom pathlib import Path\n"
             "from traincheck_agent.policy.parse_cache import default_cache_dir, parse_cached\n"
             f"parse_cached(b'x', lambda data: {{'a': 1}}, default_cache_dir({{'HOME': {str(home)!r}}}))\n"
             f"parse_cached(b'x', lambda data: {{'a': 1}}, Path({str(out / 'cache')!r}))")
    subprocess.run([sys.executable, "-c", probe], check=True)
    created = [home / ".cache", home / ".cache" / "traincheck-agent", out, out / "cache"]
    assert {str(d): oct(stat.S_IMODE(d.stat().st_mode)) for d in created} == {str(d): "0o775" for d in created}
    for cache in (home / ".cache" / "traincheck-agent", out / "cache"):
        assert stat.S_IMODE((cache / "policies").stat().st_mode) == 0o700
        assert len(_entries(cache)) == 1


def test_an_entry_others_can_write_is_not_trusted(tmp_path):
    parse, calls = _counting_parse({"version": 1})
    parse_cached(b"policy", parse, tmp_path)
    [entry] = _entries(tmp_path)
    entry.write_bytes(b'{"version": 1, "apis": [{"module": "os"}]}')
    os.chmod(entry, 0o666)
    assert parse_cached(b"policy", parse, tmp_path) == {"version": 1}
    assert len(calls) == 2
    os.chmod(entry, 0o600)
    os.chmod(tmp_path / "policies", 0o777)  # a directory others can write to: entries swappable
    assert parse_cached(b"policy", parse, tmp_path) == {"version": 1}
    assert len(calls) == 3


def test_a_damaged_entry_is_parsed_again_and_replaced(tmp_path):
    parse, calls = _counting_parse({"version": 1})
    parse_cached(b"policy", parse, tmp_path)
    [entry] = _entries(tmp_path)
    entry.write_bytes(b'{"version": ')
    assert parse_cached(b"policy", parse, tmp_path) == {"version": 1}
    assert parse_cached(b"policy", parse, tmp_path) == {"version": 1}
    assert len(calls) == 2


def test_documents_json_cannot_hold_are_not_stored(tmp_path):
    import datetime

    for doc in ({"when": datetime.date(2026, 1, 1)}, {1: "integer key"}, {"x": float("nan")}):
        parse, calls = _counting_parse(doc)
        assert parse_cached(repr(doc).encode(), parse, tmp_path) is doc
        assert parse_cached(repr(doc).encode(), parse, tmp_path) is doc
        assert len(calls) == 2
    assert _entries(tmp_path) == []


def test_a_file_that_does_not_parse_is_reported_every_time_and_never_stored(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apis: [unclosed\n")
    cache = tmp_path / "cache"
    for _ in range(2):
        _policy, problems = load_policies([bad], cache_dir=cache)
        assert [str(p) for p in problems] == [str(problems[0])]
        assert str(bad) in str(problems[0]) and "not valid YAML" in str(problems[0])
    assert not (cache / "policies").exists() or _entries(cache) == []


def test_an_unwritable_cache_costs_a_parse_only(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    parse, calls = _counting_parse({"version": 1})
    assert parse_cached(b"policy", parse, blocker) == {"version": 1}
    assert parse_cached(b"policy", parse, blocker) == {"version": 1}
    assert len(calls) == 2


def test_where_the_cache_lives():
    assert default_cache_dir({"TRAINCHECK_CACHE_DIR": "off", "HOME": "/h"}) is None
    assert default_cache_dir({"TRAINCHECK_CACHE_DIR": "/c", "HOME": "/h"}) == Path("/c")
    assert default_cache_dir({"XDG_CACHE_HOME": "/x", "HOME": "/h"}) == Path("/x/traincheck-agent")
    assert default_cache_dir({"HOME": "/h"}) == Path("/h/.cache/traincheck-agent")
    assert default_cache_dir({}) is None
