"""How the agent creates its output: directories and append-only files that honour the user's
umask and are never world-writable, even under ``umask 000``. Every directory the agent or the
CLI creates (output, report, the policy cache's parents) goes through ``make_output_dir``."""

from __future__ import annotations

import os
from pathlib import Path

OUTPUT_DIR_MODE = 0o775
OUTPUT_FILE_MODE = 0o664
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


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
    """Open ``path`` for appending (created with OUTPUT_FILE_MODE less the umask); a descriptor."""
    return os.open(path, _APPEND_FLAGS, OUTPUT_FILE_MODE)
