"""How every subcommand reports bad input: one ``traincheck: error:`` line and status 2."""

from __future__ import annotations

import sys

from traincheck_agent.terminal_text import write_line

EXIT_BAD_INPUT = 2


def fail(problem: str) -> int:
    """Print ``traincheck: error: <problem>`` on stderr (one line: a path or value with a
    newline cannot add another) and return the bad-input status."""
    write_line(sys.stderr, f"traincheck: error: {problem}")
    return EXIT_BAD_INPUT
