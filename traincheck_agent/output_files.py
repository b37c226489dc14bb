"""How the agent creates its output: directories and append-only files that honour the user's
umask and are never world-writable, even under ``umask 000``, and are written only when they
are regular files (never through a symbolic link, never into a FIFO or a device). Every
directory the agent or the CLI creates (output, report, the policy cache's parents) goes
through ``make_output_dir``."""

from __future__ import annotations

import os
import stat
from pathlib import Path

OUTPUT_DIR_MODE = 0o775
OUTPUT_FILE_MODE = 0o664
# O_NOFOLLOW: a symbolic link in the file's place is not followed; O_NONBLOCK: a FIFO there is
# not waited on (cleared again once the file is known to be regular); O_NOCTTY: a terminal
# device there does not become the process's controlling terminal.
_APPEND_FLAGS = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
                 | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))


class NotARegularFile(OSError):
    """Something other than a regular file (a symbolic link, a FIFO, a device, a directory, a
    socket) is where the agent would write one."""


def make_output_dir(path: Path | str) -> None:
    """``mkdir -p`` giving every directory it creates OUTPUT_DIR_MODE less the umask
    (``Path.mkdir(parents=True)`` gives missing parents 0o777); existing ones stay as they are."""
    path = Path(path)
    if path.is_dir():
        return
    make_output_dir(path.parent)
    try:
        path.mkdir(mode=OUTPUT_DIR_MODE)
    except FileExistsError:
        if not path.is_dir():
            raise


def open_append(path: Path | str) -> int:
    """Open ``path`` for appending (created with OUTPUT_FILE_MODE less the umask); a descriptor.

    Output directories may be shared, so someone else may have put a symbolic link to one of
    the user's files, or a FIFO, where ours goes: only a regular file is ever opened, anything
    else raises NotARegularFile (an OSError) and is left as it is."""
    try:
        fd = os.open(path, _APPEND_FLAGS, OUTPUT_FILE_MODE)
    except OSError as exc:
        try:
            kind = _kind_of(os.lstat(path).st_mode)
        except OSError:
            kind = ""
        if kind:
            raise NotARegularFile(_refusal(kind)) from exc
        raise
    try:
        kind = _kind_of(os.fstat(fd).st_mode)
        if kind:
            raise NotARegularFile(_refusal(kind))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind_of(mode: int) -> str:
    """"" for a regular file, else what it is ("a symbolic link", "a FIFO", ...)."""
    if stat.S_ISREG(mode):
        return ""
    for test, kind in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a device"


def _refusal(kind: str) -> str:
    return f"{kind} is in its place; only a regular file is written to"
