"""Reading the agent's input files (policies, invariants files) safely: regular files only, and
never more than a size limit, so a device such as /dev/zero, a FIFO or a file growing while it
is read costs no more than the limit and is never waited on."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def read_limited(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them. Raises ValueError
    with the problem (a directory, not a regular file, over the limit); OSError as ``open``."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if stat.S_ISDIR(info.st_mode):
            raise ValueError("cannot be read: Is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit:
            raise ValueError(f"file is {info.st_size} bytes, over the {limit} byte limit")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"file is over the {limit} byte limit")
    return data
