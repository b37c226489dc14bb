"""Parsed policy documents, kept on disk by the content of their file.

Every process the agent starts in loads the policies before the script's first line; parsing
them means importing PyYAML, most of what the agent adds to start-up before torch is imported.
So a parsed document is stored as JSON under the SHA-256 of the file's bytes, and read back
instead of parsing the next time: an edited file has another hash and is parsed again, and
entries are never stale. Only documents that JSON holds exactly are stored (a YAML timestamp,
a set or a NaN would come back as something else), and a file that does not parse is never
stored, so every problem is reported as on a first run.

The cache lives in ``$TRAINCHECK_CACHE_DIR`` (``off`` turns it off), else
``$XDG_CACHE_HOME/traincheck-agent``, else ``~/.cache/traincheck-agent``; missing directories
on the way are created like the output directory (``output_files``). Its ``policies``
directory is made private (``0o700``) and each entry is created ``0o600`` in a new file, then
renamed into place, so processes starting together never read half of one. An entry is used only
when it belongs to this user and nobody else can write to it or its directory: a policy decides
what runs inside the training process. A cache that cannot be read or written costs a parse,
never an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from traincheck_agent.output_files import make_output_dir

OFF = "off"
MAX_ENTRY_BYTES = 1 << 22


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """Where parsed policies are kept; None when the cache is off or no home is known."""
    env = os.environ if env is None else env
    chosen = env.get("TRAINCHECK_CACHE_DIR", "").strip()
    if chosen:
        return None if chosen.lower() == OFF else Path(chosen).expanduser()
    base = env.get("XDG_CACHE_HOME", "").strip()
    if base:
        return Path(base) / "traincheck-agent"
    home = env.get("HOME", "").strip()
    return Path(home) / ".cache" / "traincheck-agent" if home else None


PRIVATE_DIR_MODE = 0o700
ENTRY_MODE = 0o600


def _entry(cache_dir: Path, data: bytes) -> Path:
    return cache_dir / "policies" / f"{hashlib.sha256(data).hexdigest()}.json"


def _private(info: os.stat_result) -> bool:
    """Owned by this user, and writable by nobody else."""
    return info.st_uid == os.getuid() and not info.st_mode & 0o022


def _read(entry: Path) -> tuple[bool, Any]:
    try:
        if not _private(os.stat(entry.parent)):
            return False, None
        fd = os.open(entry, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as handle:
            if not _private(os.fstat(handle.fileno())):
                return False, None
            raw = handle.read(MAX_ENTRY_BYTES + 1)
        if len(raw) > MAX_ENTRY_BYTES:
            return False, None
        return True, orjson.loads(raw)
    except (OSError, orjson.JSONDecodeError):
        return False, None


def _write(entry: Path, doc: Any) -> None:
    try:
        raw = orjson.dumps(doc)
        if orjson.loads(raw) != doc:  # JSON would not give this document back
            return
        make_output_dir(entry.parent.parent)  # the cache directory and its parents, as for the output
        with contextlib.suppress(FileExistsError):
            entry.parent.mkdir(mode=PRIVATE_DIR_MODE)
        if not _private(os.stat(entry.parent)):
            return
        partial = entry.with_name(f".{entry.name}.{os.getpid()}.partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, ENTRY_MODE)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(raw)
            os.replace(partial, entry)
        except OSError:
            partial.unlink(missing_ok=True)
            raise
    except (OSError, TypeError, ValueError):  # unwritable, or not JSON data (non-string keys)
        pass


def parse_cached(data: bytes, parse: Callable[[bytes], Any], cache_dir: Path | None) -> Any:
    """``parse(data)``, or the document a previous parse of the same bytes stored under
    ``cache_dir`` (None: no cache). Whatever ``parse`` raises propagates, and nothing is
    stored for it."""
    if cache_dir is None:
        return parse(data)
    entry = _entry(cache_dir, data)
    found, doc = _read(entry)
    if found:
        return doc
    doc = parse(data)
    _write(entry, doc)
    return doc
