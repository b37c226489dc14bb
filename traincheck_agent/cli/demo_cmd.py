"""``traincheck demo``: a small training run that shows the agent at work."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from traincheck_agent.cli.errors import fail

DEFAULT_OUT = Path("traincheck_demo")
DEFAULT_STEPS = 20


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def add_parser(commands: Any) -> None:
    """Add ``demo`` to the top-level subparsers."""
    demo = commands.add_parser(
        "demo",
        help="run a small training job with the agent",
        description="Train a small model with the agent and write its traces to --out.",
    )
    demo.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})"
    )
    demo.add_argument(
        "--steps",
        type=_positive_int,
        default=DEFAULT_STEPS,
        help=f"training steps (default {DEFAULT_STEPS})",
    )
    demo.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Import the demo only now: it imports torch, which the other commands do not need."""
    try:
        from traincheck_agent.cli.demo import run_demo
    except ImportError as exc:
        return fail(f"the demo is not available: {exc}")
    return run_demo(args.out, args.steps)
