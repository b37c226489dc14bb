"""Shared helpers: run a real training script in a child process under the agent, and read
back what it recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from traincheck_agent.trace.reader import TraceFile, find_trace_files

PIPELINES = Path(__file__).parent / "pipelines"


def agent_env(mode: str | None, out_dir: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCHECK_")}
    if mode is not None:
        env["TRAINCHECK_MODE"] = mode
    if out_dir is not None:
        env["TRAINCHECK_OUT"] = str(out_dir)
    env.update(extra)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_python(args: list[str], env: dict[str, str], timeout: float = 240, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout, **kw)


def run_parallel(*jobs: tuple[list[str], dict[str, str]], timeout: float = 240) -> list[subprocess.CompletedProcess]:
    """Run python child processes side by side (most of each one's time is importing torch)."""
    procs = [(args, subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)) for args, env in jobs]
    done = []
    for args, proc in procs:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for _, other in procs:
                other.kill()
            raise
        done.append(subprocess.CompletedProcess(args, proc.returncode, out, err))
    return done


@dataclass
class Trace:
    path: Path
    header: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)

    def calls(self, api: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == "call" and (api is None or r["api"] == api)]

    def states(self, where: str | None = None, var: str | None = None) -> list[dict[str, Any]]:
        return [
            r for r in self.records
            if r["kind"] == "state" and (where is None or r["where"] == where) and (var is None or r["var"] == var)
        ]


MLP = str(PIPELINES / "mlp_train.py")


def collect_mlp(root: Path, name: str, *args: str) -> Path:
    """Collect a trace of the MLP pipeline with ``args`` under ``root / name``."""
    out = root / name
    proc = run_python([MLP, *args], agent_env("collect", out))
    assert proc.returncode == 0, proc.stderr
    return out


def read_traces(out_dir: Path) -> list[Trace]:
    traces = []
    for path in find_trace_files([out_dir]):
        tf = TraceFile(path)
        traces.append(Trace(path, tf.header, list(tf.records())))
    return traces


@pytest.fixture
def pipelines() -> Path:
    return PIPELINES
