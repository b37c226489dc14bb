"""Shared helpers: run a real training script in a child process under the agent, or run the
agent inside the pytest process itself (``agent_in_process``), and read back what it recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from traincheck_agent.trace.reader import TraceFile, find_trace_files

PIPELINES = Path(__file__).parent / "pipelines"

# Under pytest-xdist every worker starts training children of its own. Each child would size its
# OpenMP pool to every core, and pools that outnumber the cores spin against each other: on two
# cores one thread per child made the heavy modules a sixth faster. Numerics are compared only
# between runs of one test, which all see the same setting.
# xdist also puts its rootdir in front of PYTHONPATH, with an empty entry after it when there was
# none: a child would read that as "the current directory", which the tests of what a working
# directory can inject must not see. Children get the PYTHONPATH the suite was started with.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _XDIST_ENTRY = os.getcwd() + os.pathsep
    if os.environ.get("PYTHONPATH", "").startswith(_XDIST_ENTRY):
        _rest = os.environ["PYTHONPATH"][len(_XDIST_ENTRY):]
        if _rest:
            os.environ["PYTHONPATH"] = _rest
        else:
            del os.environ["PYTHONPATH"]


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


# -- the agent in the pytest process ----------------------------------------------------------

def _watched_attributes() -> dict[str, Any]:
    """Attributes of torch the core probes wrap, as found in their owners' ``__dict__``."""
    import torch

    return {
        "Module.__call__": vars(torch.nn.Module)["__call__"],
        "Module.train": vars(torch.nn.Module)["train"],
        "Module.zero_grad": vars(torch.nn.Module)["zero_grad"],
        "Optimizer.__init__": vars(torch.optim.Optimizer)["__init__"],
        "Tensor.backward": vars(torch.Tensor)["backward"],
        "autograd.backward": torch.autograd.backward,
    }


def run_script(path: str | Path, *args: str) -> dict[str, Any]:
    """Run a pipeline script in this process as ``__main__`` with ``args`` (the in-process
    counterpart of ``run_python``); returns the script's globals."""
    import runpy

    saved = sys.argv
    sys.argv = [str(path), *args]
    try:
        return runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = saved


@dataclass
class InProcessAgent:
    """The agent active in this process; ``trace()`` flushes its writer and reads the trace."""

    mode: str
    out_dir: Path
    writer: Any
    stopped: bool = False

    def flush(self) -> None:
        if self.writer is not None and not self.stopped:
            self.writer.flush(10.0)

    def traces(self) -> list[Trace]:
        self.flush()
        return read_traces(self.out_dir)

    def trace(self) -> Trace:
        traces = self.traces()
        assert len(traces) == 1, [t.path for t in traces]
        return traces[0]

    def stop(self) -> None:
        """Take the agent out (the writer is closed: its last records are written)."""
        if not self.stopped:
            from traincheck_agent.agent.in_process import stop_in_process

            self.stopped = True
            stop_in_process()


@contextmanager
def agent_active(mode: str, out_dir: Path, **settings: str) -> Iterator[InProcessAgent]:
    """The agent in this process for the ``with`` block, as ``agent_in_process`` starts it, for
    fixtures of any scope: taken out at the end, and torch's wrapped attributes and the SIGTERM
    handler checked to be what they were."""
    import signal

    from traincheck_agent.agent.in_process import start_in_process

    before = _watched_attributes()
    sigterm = signal.getsignal(signal.SIGTERM)
    env = {"TRAINCHECK_MODE": mode, "TRAINCHECK_OUT": str(out_dir), **settings}
    if mode == "check":
        env.setdefault("TRAINCHECK_CHECKER", "thread")
    agent = InProcessAgent(mode, out_dir, None)
    try:
        agent.writer = start_in_process(mode, env)
        yield agent
    finally:
        agent.stop()
    after = _watched_attributes()
    changed = [name for name, value in before.items() if after[name] is not value]
    assert not changed, f"left wrapped after the agent was taken out: {changed}"
    assert signal.getsignal(signal.SIGTERM) is sigterm


def collect_in_process(script: str | Path, out_dir: Path, *args: str, threads: int | None = None,
                       **settings: str) -> str:
    """Collect a trace of ``script`` with ``args`` under ``out_dir`` in this process (the
    in-process counterpart of ``run_python`` with ``agent_env("collect", out_dir, **settings)``);
    ``threads`` stands for ``OMP_NUM_THREADS``. Returns what the script printed."""
    import contextlib
    import io

    import torch

    saved_threads = torch.get_num_threads()
    printed = io.StringIO()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        with torch.random.fork_rng(devices=[]), agent_active("collect", out_dir, **settings), \
                contextlib.redirect_stdout(printed):
            run_script(script, *args)
    finally:
        torch.set_num_threads(saved_threads)
    return printed.getvalue()


def run_here(script: str | Path, *args: str, mode: str | None = None, out: Path | None = None,
             **settings: str) -> tuple[str, str]:
    """Run ``script`` with ``args`` in this process from a fresh random state, under the agent
    for ``mode`` (writing to ``out``; ``settings`` are ``TRAINCHECK_*`` values) or without it:
    what it printed to stdout and to stderr."""
    import contextlib
    import io

    import torch

    printed, errors = io.StringIO(), io.StringIO()
    if mode is not None and out is None:
        raise ValueError("a run under the agent needs an output folder")
    agent = agent_active(mode, out, **settings) if mode is not None and out is not None else contextlib.nullcontext()
    with torch.random.fork_rng(devices=[]), contextlib.redirect_stdout(printed), \
            contextlib.redirect_stderr(errors), agent:
        run_script(script, *args)
    return printed.getvalue(), errors.getvalue()


def plain_losses(*args: str, script: str | Path = MLP) -> list[float]:
    """The losses ``script`` (the MLP pipeline by default) prints on its last line when run with
    ``args`` in this process without the agent: the plain counterpart whose numbers a run under
    the agent must reproduce bit for bit. The pipelines seed themselves, and their sizes are far
    below torch's parallel grain, so the thread count does not change a result."""
    import json

    return json.loads(run_here(script, *args)[0].strip().splitlines()[-1])["losses"]


def collect_in_one_child(script: str | Path, runs: dict[Path, list[str]], timeout: float = 400,
                         **env: str) -> None:
    """Collect the runs of ``script`` (output folder -> its arguments) one after another in a
    single child process, the agent started and taken out around each: for pipelines whose
    framework takes longer to import than to train (Lightning), and that stay out of the pytest
    process. ``env`` is added to the child's environment."""
    import json
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as spec:
        json.dump({str(out): list(args) for out, args in runs.items()}, spec)
    try:
        proc = run_python([str(Path(__file__).parent / "runs_in_one_process.py"), str(script), spec.name],
                          agent_env(None, None, **env), timeout=timeout)
    finally:
        os.unlink(spec.name)
    assert proc.returncode == 0, proc.stderr[-3000:]


def collect_mlp_here(root: Path, name: str, *args: str) -> Path:
    """``collect_mlp`` in this process, for fixtures of any scope: the MLP pipeline with ``args``
    under ``root / name``."""
    collect_in_process(MLP, root / name, *args)
    return root / name


def collect_mlp_in_process(agent_in_process: Any, root: Path, name: str, *args: str) -> Path:
    """``collect_mlp`` in this process: the MLP pipeline with ``args`` under ``root / name``."""
    out = root / name
    agent = agent_in_process("collect", out_dir=out)
    run_script(MLP, *args)
    agent.stop()
    return out


@pytest.fixture
def agent_in_process(tmp_path: Path):
    """Start the agent in the pytest process, on the torch it has already imported:
    ``agent_in_process(mode="collect", out_dir=None, **settings)`` where ``settings`` are
    ``TRAINCHECK_*`` values (``TRAINCHECK_POLICY=...``), as for ``agent_env``; the process
    environment is not read. Check mode runs its checker in a thread unless
    ``TRAINCHECK_CHECKER`` says otherwise. Returns an ``InProcessAgent``; at the end of the test
    the agent is taken out, and torch's wrapped attributes and the SIGTERM handler are checked
    to be what they were. The agent never installs the flush at exit or on SIGTERM here
    (``agent.in_process``): tests of those need a child process."""
    import signal

    before = _watched_attributes()
    sigterm = signal.getsignal(signal.SIGTERM)
    started: list[InProcessAgent] = []

    def start(mode: str = "collect", out_dir: Path | None = None, **settings: str) -> InProcessAgent:
        from traincheck_agent.agent.in_process import start_in_process

        assert not any(not a.stopped for a in started), "one agent at a time"
        out = out_dir if out_dir is not None else tmp_path / f"agent{len(started)}"
        env = {"TRAINCHECK_MODE": mode, "TRAINCHECK_OUT": str(out), **settings}
        if mode == "check":
            env.setdefault("TRAINCHECK_CHECKER", "thread")
        agent = InProcessAgent(mode, out, None)
        started.append(agent)
        agent.writer = start_in_process(mode, env)
        return agent

    try:
        yield start
    finally:
        for agent in started:
            agent.stop()
    after = _watched_attributes()
    changed = [name for name, value in before.items() if after[name] is not value]
    assert not changed, f"left wrapped after the agent was taken out: {changed}"
    assert signal.getsignal(signal.SIGTERM) is sigterm


# -- distributed reference runs shared by the whole session -----------------------------------

TORCHRUN = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone"]


class SharedTorchrunTraces:
    """Traces of 2-rank torchrun collections that several test modules read, each collected once
    per session (a torchrun run is three processes importing torch), whichever pytest-xdist worker
    asks first; the others wait on a lock file and read the same folder. A trace folder is made
    read-only once collected: tests read it and write their own output elsewhere."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.stderr: dict[Path, str] = {}

    def __call__(self, script: str, *args: str) -> Path:
        import fcntl
        import hashlib

        key = "\0".join((script, *args))
        out = self.root / f"run-{hashlib.sha1(key.encode()).hexdigest()[:12]}"
        stderr_file = out.with_suffix(".stderr")
        with open(out.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not stderr_file.exists():
                proc = run_python([*TORCHRUN, str(PIPELINES / script), *args],
                                  agent_env("collect", out, OMP_NUM_THREADS="1"))
                assert proc.returncode == 0, proc.stderr
                for folder in (out, *(p for p in out.rglob("*") if p.is_dir())):
                    folder.chmod(0o555)
                stderr_file.write_text(proc.stderr)
        self.stderr[out] = stderr_file.read_text()
        return out


@pytest.fixture(scope="session")
def torchrun_traces(tmp_path_factory) -> SharedTorchrunTraces:
    """``torchrun_traces("ddp_train.py", "--steps", "6")``: the folder of that run's traces
    (collect mode, ``OMP_NUM_THREADS=1``), collected on first use in the session. Under
    pytest-xdist the folder lies beside the workers' own, so that all of them share it."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "torchrun_traces"
    root.mkdir(exist_ok=True)
    return SharedTorchrunTraces(root)


def violations_in(path: Path) -> list[dict[str, Any]]:
    """The violation records of a ``violations-<rank>.jsonl`` file, or of every such file under
    a folder; the stats records that close a check's log (``event``: coverage, waivers) are left
    out."""
    import json

    files = sorted(path.glob("violations-*.jsonl")) if path.is_dir() else [path]
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]
    return [record for record in lines if "event" not in record]
