"""Run the online checker in a child process (``checker_worker``), fed through a pipe.

Python threads share one interpreter lock: a checker thread in the training process takes that
lock for every record it judges, and the training thread waits for it (measured on the bundled
CNN: about as much training-loop time as the checker's own CPU time). In a child process the
judging runs beside the training; what stays in the training process is one ``orjson.dumps``
per batch (about 0.3 us per record) on the trace writer's thread and a reader thread that
waits on the child's reports.

The child is started at start-up (beside the script's import of torch), with this interpreter
and no ``TRAINCHECK_MODE`` (so the startup hook leaves it alone). If it cannot start, or dies,
the caller falls back to checking in its own thread; :meth:`close` never waits past its
timeout. It pays only where a core is free for it (``spare_core``): beside torch threads that
already fill every core it slows them more than a checker thread does.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

import traincheck_agent
from traincheck_agent import faults
from traincheck_agent.agent.record.trace_writer import write_all
from traincheck_agent.inference.invariant import Invariant

OnViolation = Callable[[dict[str, Any]], None]
OnMessage = Callable[[str], None]


def _positive_int(raw: str | None) -> int | None:
    try:
        value = int(raw or "")
    except ValueError:
        return None
    return value if value > 0 else None


def spare_core(env: Mapping[str, str] | None = None, cores: int | None = None) -> bool:
    """Whether the checker process would find a CPU core that the training leaves free.

    The training's compute threads are ``OMP_NUM_THREADS`` per process (torch's default, when
    unset, is about one per core) times the processes on this host (``LOCAL_WORLD_SIZE``, set
    by torchrun). Where they fill every core, a checker process would preempt one of them, and
    a parallel op waits for its slowest thread: a thread of the training process costs less.
    """
    env = os.environ if env is None else env
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
    threads = _positive_int(env.get("OMP_NUM_THREADS")) or cores
    local_processes = _positive_int(env.get("LOCAL_WORLD_SIZE")) or 1
    return cores > threads * local_processes


def _package_root() -> str:
    """The folder that holds the agent's package, where it is installed."""
    return str(Path(traincheck_agent.__file__).resolve().parent.parent)


def _child_env() -> dict[str, str]:
    # The agent stays off in the child; only the checker's own test switch goes along.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCHECK_") or k == faults.ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH", "")) if p)
    return env


class CheckerProcess:
    """One checker child: ``send`` batches of records, reports come back on a reader thread."""

    def __init__(self, invariants: Iterable[Invariant], on_violation: OnViolation, on_error: OnMessage,
                 on_lost: OnMessage) -> None:
        """``on_error``: a contained error the child reported; ``on_lost``: the child ended
        before finishing (crashed or killed). All three are called on the reader thread."""
        self.invariants = list(invariants)
        self.on_violation = on_violation
        self.on_error = on_error
        self.on_lost = on_lost
        self.proc: subprocess.Popen[bytes] | None = None
        self.fed: int | None = None  # records the child checked, once it is done
        self.coverage: dict[str, Any] = {}  # its examples judged / not covered (Coverage.to_json)
        self._stdin: int | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        """Start the child and hand it the invariants; raises OSError when it cannot start."""
        executable = sys.executable
        if not executable:
            raise OSError("no Python executable to start the checker with")
        # ``-m`` puts the working directory first on the child's path: started in the training's
        # folder, a ``traincheck_agent`` lying there would run in place of ours. It starts in the
        # folder that holds the installed package instead (it reads and writes no files).
        self.proc = subprocess.Popen(
            [executable, "-m", "traincheck_agent.agent.checking.checker_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_child_env(), cwd=_package_root(), bufsize=0,
        )
        assert self.proc.stdin is not None
        self._stdin = self.proc.stdin.fileno()
        self._reader = threading.Thread(target=self._read, name="traincheck-checker-reader", daemon=True)
        self._reader.start()
        write_all(self._stdin, orjson.dumps({"invariants": [i.to_json() for i in self.invariants]}) + b"\n")

    def send(self, records: list[dict[str, Any]]) -> None:
        """Queue one batch for the child (blocks while its pipe is full); OSError if it is gone."""
        if self._stdin is None:
            raise OSError("the checker process is not running")
        data = orjson.dumps(records, default=str, option=orjson.OPT_NON_STR_KEYS) + b"\n"
        write_all(self._stdin, data)

    def close(self, timeout_s: float) -> bool:
        """End the input, wait (at most ``timeout_s``) for the last reports; True when the child
        finished its checks."""
        proc = self.proc
        if proc is None:
            return False
        self._close_input()
        reader = self._reader
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout_s)
        try:
            proc.wait(timeout=0.5 if self.fed is not None else 0.05)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)
        return self.fed is not None

    def forget_after_fork(self) -> None:
        """In a forked child of the training process: drop this copy of the pipe, so that the
        checker still sees its input end when the training process closes it."""
        self._close_input()
        self.proc = None

    def _close_input(self) -> None:
        stdin = self.proc.stdin if self.proc is not None else None
        self._stdin = None
        if stdin is not None:
            with contextlib.suppress(OSError):
                stdin.close()

    def _read(self) -> None:
        proc = self.proc
        if proc is None or proc.stdout is None:
            return
        for line in proc.stdout:
            try:
                message = orjson.loads(line)
            except orjson.JSONDecodeError:
                self.on_error(f"unreadable report from the checker process: {line[:200]!r}")
                continue
            if "violation" in message:
                self.on_violation(message["violation"])
            elif "error" in message:
                self.on_error(str(message["error"]))
            elif "done" in message:
                coverage = message["done"].get("coverage")
                if isinstance(coverage, dict):
                    self.coverage = coverage
                self.fed = int(message["done"].get("fed", 0))
        if self.fed is None:
            code = proc.wait()
            self.on_lost(f"the checker process ended (exit status {code}) before the run did")
