"""How every subcommand reports bad input: one ``traincheck: error:`` line and status 2."""

from __future__ import annotations

import sys

EXIT_BAD_INPUT = 2


def fail(problem: str) -> int:
    """Print ``traincheck: error: <problem>`` on stderr and return the bad-input status."""
    print(f"traincheck: error: {problem}", file=sys.stderr)
    return EXIT_BAD_INPUT
