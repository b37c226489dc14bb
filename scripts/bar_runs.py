"""What the detection and generalization bars share: running a pipeline under collect mode,
inferring, checking offline, and judging whether the top-ranked group points at the cause.

Imported by ``scripts/detection_bar.py`` and ``scripts/generalization_bar.py`` (run from the
repository root as ``python scripts/<bar>.py``, so this folder is on ``sys.path``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traincheck_agent.check.offline import check_offline
from traincheck_agent.inference.coverage import Coverage
from traincheck_agent.inference.invariant import Invariant
from traincheck_agent.report.triage import Group, triage
from traincheck_agent.report.violations import violation_record

RUN_TIMEOUT_S = 300


@dataclass(frozen=True)
class Run:
    """One training run: a script, its arguments, how many ranks, and how it is launched
    (``torchrun``: the launcher starts the ranks; ``python``: one process, which may spawn its
    own ranks)."""

    script: str
    args: tuple[str, ...] = ()
    ranks: int = 1
    launcher: str = ""

    def command(self) -> list[str]:
        launcher = self.launcher or ("torchrun" if self.ranks > 1 else "python")
        if launcher == "torchrun":
            return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={self.ranks}", "--standalone",
                    self.script, *self.args]
        return [sys.executable, self.script, *self.args]

    def label(self) -> str:
        return f"{Path(self.script).stem} {' '.join(self.args)}".strip()


def collect(run: Run, out: Path, reuse: bool = False) -> Path:
    """Run ``run`` in collect mode with its traces under ``out``; with ``reuse``, traces already
    there are taken as they are."""
    if reuse and out.is_dir() and any(out.glob("trace_*.jsonl")):
        return out
    env = dict(os.environ, TRAINCHECK_MODE="collect", TRAINCHECK_OUT=str(out), OMP_NUM_THREADS="1")
    proc = subprocess.run(run.command(), env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"{run.label()} failed:\n{proc.stderr[-2000:]}")
    return out


@dataclass
class Verdict:
    """One checked run: its violations, ranked groups and coverage."""

    violations: list[dict[str, Any]]
    groups: list[Group]
    coverage: Coverage

    @property
    def first_step(self) -> int | None:
        return min((v["step"] for v in self.violations), default=None)

    @property
    def top(self) -> Group | None:
        return self.groups[0] if self.groups else None

    def top_text(self) -> str | None:
        top = self.top
        return None if top is None else f"{top.relation} {top.subject}: {top.expected}"[:160]


def check(invariants: list[Invariant], trace_dir: Path) -> Verdict:
    by_id = {inv.id: inv for inv in invariants}
    coverage = Coverage()
    violations = check_offline(invariants, [trace_dir], coverage=coverage)
    records = [violation_record(v, by_id.get(v["invariant"]), rank=(v.get("ranks") or [0])[0], run_id=None)
               for v in violations]
    return Verdict(violations, triage(records, by_id), coverage)


def points_at(group: Group | None, relations: Iterable[str], texts: Iterable[str]) -> bool:
    """Whether ``group`` is of one of ``relations`` and names one of ``texts`` (any text when
    none is given) in its subject, pattern, expectation, variables or APIs."""
    if group is None or group.relation not in set(relations):
        return False
    fields = (group.subject, group.pattern, group.expected, *group.variables, *group.apis)
    wanted = [t for t in texts if t]
    return not wanted or any(t in f for t in wanted for f in fields)
