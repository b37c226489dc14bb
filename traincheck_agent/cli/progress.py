"""A one-line progress bar on stderr for long CLI jobs (redrawn in place, at most 10 times a
second; shown only on a terminal unless asked for)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

_WIDTH = 30
_MIN_INTERVAL_S = 0.1


class ProgressBar:
    def __init__(self, title: str, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.title = title
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._last_draw = 0.0
        self._drawn = False

    def update(self, done: int, total: int, label: str = "") -> None:
        """Show ``done`` of ``total`` units of work, with ``label`` saying what is running."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last_draw < _MIN_INTERVAL_S and done < total:
            return
        self._last_draw = now
        fraction = min(1.0, done / total) if total > 0 else 1.0
        filled = int(fraction * _WIDTH)
        bar = "#" * filled + "-" * (_WIDTH - filled)
        self.stream.write(f"\r{self.title} [{bar}] {fraction:4.0%} {label:<24.24}")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
