"""process_role.classify: argv tables for every rule, then the real processes torch and the stdlib
start, observed from inside each process through a sitecustomize that records classify()."""

from __future__ import annotations

import importlib.util
import json
import multiprocessing.spawn
import os
import subprocess
import sys
from pathlib import Path

import pytest

from traincheck_agent.agent.process.role import ProcessRole, classify

REPO = Path(__file__).resolve().parents[1]
PY = "/venv/bin/python"
BIN = "/venv/bin"
SITE = "/venv/lib/python3.11/site-packages"
TRAINING = ProcessRole.TRAINING
LAUNCHER = ProcessRole.LAUNCHER
SPAWN_CHILD = ProcessRole.SPAWN_CHILD
COMPILE_WORKER = ProcessRole.COMPILE_WORKER
TOOL = ProcessRole.TOOL


def role_of(argv: list[str], **kwargs: object) -> ProcessRole:
    kwargs.setdefault("environ", {})
    return classify(argv, **kwargs)[0]  # type: ignore[arg-type]


def torch_dir() -> Path:
    spec = importlib.util.find_spec("torch")  # finds torch without importing it
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


# --- argv tables ----------------------------------------------------------------------------

CASES: list[tuple[ProcessRole, list[str]]] = [
    # plain training runs, including what launchers start for each rank
    (TRAINING, [PY, "train.py", "--lr", "0.1"]),
    (TRAINING, [PY, "-u", "train.py", "--local_rank=0", "--deepspeed"]),  # deepspeed rank
    (TRAINING, [PY, "-u", "-m", "mypkg.train", "--epochs", "1"]),  # torchrun --module rank
    (TRAINING, [PY, "-W", "ignore", "-X", "faulthandler", "-Bu", "train.py"]),
    (TRAINING, [PY, "-Wignore", "-Ximporttime", "--check-hash-based-pycs", "never", "t.py"]),
    (TRAINING, [PY, "--", "train.py"]),
    (TRAINING, [PY, "-c", "import torch; torch.ones(2).sum()"]),
    (TRAINING, [PY, "-"]),  # script on stdin
    (TRAINING, [PY]),  # REPL
    (TRAINING, []),  # embedded interpreter
    (TRAINING, [PY, "-m", "pytest", "-q", "tests/"]),  # training may run under pytest
    (TRAINING, [PY, f"{BIN}/pytest", "-x"]),
    (TRAINING, [PY, "deepspeed_train.py"]),  # names that merely contain a launcher's
    (TRAINING, [PY, "pipeline.py"]),
    (TRAINING, [PY, "ds.py"]),  # the user's script, not DeepSpeed's `ds` console script
    (TRAINING, [PY, "pip.py"]),
    (TRAINING, [PY, "torchrun.py", "--lr", "1"]),
    (TRAINING, [PY, f"{BIN}/pip3-trainer"]),
    (TRAINING, [PY, "scripts/accelerate_finetune.py"]),
    (TRAINING, [PY, "-m", "torch.distributed.run_my_job"]),
    (TRAINING, [PY, "-m", "pipx_like"]),
    # launchers
    (LAUNCHER, [PY, f"{BIN}/torchrun", "--standalone", "--nproc-per-node=2", "train.py"]),
    (LAUNCHER, [PY, "-m", "torch.distributed.run", "--nnodes=1", "train.py"]),
    (LAUNCHER, [PY, "-u", "-m", "torch.distributed.launch", "--nproc_per_node=2", "t.py"]),
    (LAUNCHER, [PY, "-mtorch.distributed.run", "t.py"]),
    (LAUNCHER, [PY, "-Bm", "torch.distributed.run", "t.py"]),
    (LAUNCHER, [PY, f"{SITE}/torch/distributed/run.py", "--nproc-per-node=2", "t.py"]),
    (LAUNCHER, ["C:\\Py\\python.exe", "C:\\venv\\Scripts\\torchrun.exe", "train.py"]),
    (LAUNCHER, [PY, f"{BIN}/deepspeed", "--num_gpus=2", "train.py", "--deepspeed"]),
    (LAUNCHER, [PY, f"{BIN}/ds", "train.py"]),
    (LAUNCHER, [PY, f"{BIN}/deepspeed.pt", "train.py"]),
    (LAUNCHER, [PY, "-m", "deepspeed.launcher.runner", "--num_gpus=1", "train.py"]),
    (
        LAUNCHER,
        [
            PY,
            "-u",
            "-m",
            "deepspeed.launcher.launch",
            "--world_info=eyJsb2NhbGhvc3QiOiBbMF19",
            "--master_addr=127.0.0.1",
            "--master_port=29500",
            "train.py",
            "--deepspeed",
        ],
    ),
    (LAUNCHER, [PY, f"{BIN}/accelerate", "launch", "--num_processes", "2", "train.py"]),
    (LAUNCHER, [PY, f"{BIN}/accelerate-launch", "train.py"]),
    (LAUNCHER, [PY, "-m", "accelerate.commands.launch", "--num_processes=2", "train.py"]),
    (LAUNCHER, [PY, "-m", "accelerate.commands.accelerate_cli", "launch", "train.py"]),
    # multiprocessing children (stdlib command lines other than the one built below)
    (
        SPAWN_CHILD,
        [
            PY,
            "-B",
            "-s",
            "-c",
            "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)",
            "--multiprocessing-fork",
        ],
    ),
    (SPAWN_CHILD, [PY, "--multiprocessing-fork", "tracker_fd=5", "pipe_handle=7"]),  # frozen
    (
        SPAWN_CHILD,
        [
            PY,
            "-c",
            "from multiprocessing.forkserver import main; "
            "main(5, 6, ['__main__'], **{'sys_path': ['/x']})",
        ],
    ),
    (
        SPAWN_CHILD,
        [
            PY,
            "-c",
            "from multiprocess.spawn import spawn_main; spawn_main(pipe_handle=9)",
            "--multiprocessing-fork",
        ],
    ),
    (
        SPAWN_CHILD,
        [
            PY,
            "-m",
            "joblib.externals.loky.backend.popen_loky_posix",
            "--process-name",
            "LokyProcess-1",
            "--pipe",
            "5",
            "--semaphore",
            "-1",
        ],
    ),
    # torch.compile helpers
    (COMPILE_WORKER, [PY, "-m", "torch._vendor.quack._compile_worker"]),
    (
        COMPILE_WORKER,
        [
            PY,
            "/tmp/torchinductor_me/hl/ab/generate_kernel.py",
            "-g",
            "kernel",
            "-o",
            "/tmp/torchinductor_me/hl/ab",
            "-f",
            "halide_kernel",
            "-e",
            "static_library,h,schedule",
        ],
    ),
    # tools
    (TOOL, [PY, f"{BIN}/pip", "install", "torch==2.13.0"]),
    (TOOL, [PY, f"{BIN}/pip3", "list"]),
    (TOOL, [PY, f"{BIN}/pip3.11", "list"]),
    (TOOL, ["C:\\Py\\python.exe", "C:\\venv\\Scripts\\pip.exe", "install", "x"]),
    (TOOL, [PY, "-m", "pip", "install", "-e", ".[dev]"]),
    (TOOL, [PY, f"{SITE}/pip", "install", "x"]),  # pip --python re-running itself
    (TOOL, [PY, f"{SITE}/pip/__pip-runner__.py", "install", "--prefix", "/tmp/env", "hatchling"]),
    (
        TOOL,
        [
            PY,
            f"{SITE}/pip/_vendor/pyproject_hooks/_in_process/_in_process.py",
            "build_wheel",
            "/tmp/tmpab12",
        ],
    ),
    (
        TOOL,
        [
            PY,
            f"{SITE}/pyproject_hooks/_in_process/_in_process.py",
            "get_requires_for_build_wheel",
            "/tmp/tmpcd34",
        ],
    ),
    (TOOL, [PY, "-m", "venv", ".venv"]),
    (TOOL, [PY, "-m", "ensurepip", "--upgrade"]),
    (TOOL, [PY, f"{BIN}/traincheck", "report", "traincheck_out"]),
    (TOOL, [PY, "-m", "traincheck_agent.cli", "report"]),
    (TOOL, [PY, "-m", "traincheck_agent"]),
    (TOOL, [PY, "-m", "torch.utils.collect_env"]),
    (TOOL, [PY, f"{BIN}/accelerate", "config", "default"]),
    (TOOL, [PY, f"{BIN}/accelerate", "env"]),
    (TOOL, [PY, f"{BIN}/ds_report"]),
    (TOOL, [PY, "-B", "-c", "from multiprocessing.resource_tracker import main;main(5)"]),
]


def _case_id(value: object) -> str:
    if isinstance(value, ProcessRole):
        return value.name
    return " ".join(str(a).rsplit("/", 1)[-1] for a in value)[:60]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("expected", "argv"), CASES, ids=_case_id)
def test_argv_table(expected: ProcessRole, argv: list[str]) -> None:
    role, reason = classify(argv, environ={})
    assert role is expected, (argv, reason)
    assert reason and "\n" not in reason


@pytest.mark.slow
def test_stdlib_spawn_command_line_is_spawn_child() -> None:
    argv = multiprocessing.spawn.get_command_line(tracker_fd=5, pipe_handle=7)
    assert role_of(argv) is SPAWN_CHILD


@pytest.mark.slow
def test_torch_compile_worker_command_lines() -> None:
    """The argv torch's SubprocPool and autotune process build: sys.executable + file + flags."""
    inductor = torch_dir() / "_inductor"
    worker = inductor / "compile_worker" / "__main__.py"
    autotune = inductor / "__autotune_main__.py"
    assert worker.is_file() and autotune.is_file()  # torch still ships them here
    pool_flags = [
        "--pickler=torch._inductor.compile_worker.subproc_pool.SubprocPickler",
        "--kind=fork",
        "--workers=8",
        "--parent=4242",
        "--read-fd=5",
        "--write-fd=8",
        "--torch-key=AAECAw==",
    ]
    assert role_of([sys.executable, str(worker), *pool_flags]) is COMPILE_WORKER
    fds = ["--parent=4242", "--read-fd=5", "--write-fd=8"]
    assert role_of([sys.executable, str(autotune), *fds]) is COMPILE_WORKER


@pytest.mark.slow
def test_inductor_library_probe_is_compile_worker() -> None:
    isa = pytest.importorskip("torch._inductor.cpu_vec_isa")
    code = isa.VecISA._avx_py_load.replace("__lib_path__", "/tmp/torchinductor_me/x.so")
    assert role_of([sys.executable, "-c", code]) is COMPILE_WORKER


@pytest.mark.slow
def test_spawn_child_of_compile_worker_is_compile_worker() -> None:
    child = multiprocessing.spawn.get_command_line(tracker_fd=5, pipe_handle=7)
    worker = [
        sys.executable,
        str(torch_dir() / "_inductor/compile_worker/__main__.py"),
        "--kind=spawn",
    ]
    assert role_of(child, parent_argv=worker) is COMPILE_WORKER
    assert role_of(child, parent_argv=[sys.executable, "train.py"]) is SPAWN_CHILD
    assert role_of(child, parent_argv=[]) is SPAWN_CHILD


@pytest.mark.parametrize(
    ("argv", "skip", "expected"),
    [
        ([PY, "serve.py"], ["serve.py"], TOOL),
        ([PY, "serve.py"], ["serve"], TOOL),
        ([PY, "/srv/app/Serve.py", "--port", "1"], ["serve"], TOOL),
        ([PY, "serve_model.py"], ["serve"], TRAINING),
        ([PY, "-m", "ray.util.client.server"], ["ray"], TOOL),
        ([PY, "-m", "raytrain"], ["ray"], TRAINING),
        (["/usr/bin/uwsgi", "--ini", "app.ini"], ["uwsgi"], TOOL),
        ([PY, "-m", "torch.distributed.run", "t.py"], ["torch.distributed.run"], TOOL),
        ([PY, "train.py"], [""], TRAINING),
    ],
)
def test_extra_skip(argv: list[str], skip: list[str], expected: ProcessRole) -> None:
    assert role_of(argv, extra_skip=skip) is expected


def test_skip_programs_from_environment() -> None:
    env = {"TRAINCHECK_SKIP_PROGRAMS": os.pathsep.join(["other", "serve.py"])}
    role, reason = classify([PY, "serve.py"], environ=env)
    assert role is TOOL and "serve.py" in reason
    assert classify([PY, "train.py"], environ=env)[0] is TRAINING


def test_this_pytest_process_is_training() -> None:
    assert classify(environ={})[0] is TRAINING


# --- real processes -------------------------------------------------------------------------

RECORDER = """
import json, os, sys
from traincheck_agent.agent.process.role import classify
role, reason = classify()
with open(os.path.join(os.environ["ROLE_LOG_DIR"], f"{os.getpid()}.json"), "w") as f:
    json.dump({"role": role.name, "reason": reason, "argv": sys.orig_argv}, f)
"""


@pytest.fixture
def recorded(tmp_path: Path):
    """Run a command whose every Python process records its own classify() result."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(RECORDER)
    log = tmp_path / "log"
    log.mkdir()

    def run(argv: list[str], timeout: float = 180) -> list[dict[str, object]]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCHECK_")}
        env.update(ROLE_LOG_DIR=str(log), PYTHONPATH=os.pathsep.join([str(hook), str(REPO)]))
        proc = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return [json.loads(p.read_text()) for p in sorted(log.glob("*.json"))]

    return run


def roles(records: list[dict[str, object]]) -> list[str]:
    return sorted(str(r["role"]) for r in records)


@pytest.mark.slow
def test_real_pip_is_tool(recorded) -> None:
    records = recorded([sys.executable, "-m", "pip", "--version"])
    assert roles(records) == ["TOOL"]


MP_SCRIPT = """
import multiprocessing as mp

def work(q):
    q.put("done")

if __name__ == "__main__":
    for method in ("spawn", "forkserver"):
        ctx = mp.get_context(method)
        q = ctx.Queue()
        p = ctx.Process(target=work, args=(q,))
        p.start()
        assert q.get(timeout=60) == "done"
        p.join()
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="forkserver is POSIX only")
def test_real_multiprocessing_children(recorded, tmp_path: Path) -> None:
    (tmp_path / "mp_job.py").write_text(MP_SCRIPT)
    records = recorded([sys.executable, "mp_job.py"])
    reasons = sorted(str(r["reason"]) for r in records)
    # the job itself, its spawn child, the forkserver (its children are forks of it and do
    # not start a new interpreter) and the resource tracker
    assert roles(records) == ["SPAWN_CHILD", "SPAWN_CHILD", "TOOL", "TRAINING"], records
    assert "multiprocessing forkserver" in reasons
    assert "multiprocessing resource tracker" in reasons


FAKE_WORKER = """
import multiprocessing as mp

def work():
    pass

if __name__ == "__main__":
    p = mp.get_context("spawn").Process(target=work)
    p.start()
    p.join()
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_real_spawn_child_of_compile_worker_path(recorded, tmp_path: Path) -> None:
    """The parent lookup through /proc, with a script that only has the worker's path."""
    worker = tmp_path / "torch" / "_inductor" / "compile_worker" / "__main__.py"
    worker.parent.mkdir(parents=True)
    worker.write_text(FAKE_WORKER)
    records = recorded([sys.executable, str(worker), "--kind=spawn"])
    by_role = roles(records)
    assert by_role.count("COMPILE_WORKER") == 2, records  # the worker and its spawn child


POOL_SCRIPT = """
import os, time
from torch._inductor.compile_worker.subproc_pool import SubprocPool

if __name__ == "__main__":
    pool = SubprocPool(1)  # starts the worker process; its record is written at startup
    deadline = time.monotonic() + 120
    while len(os.listdir(os.environ["ROLE_LOG_DIR"])) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    pool.process.kill()  # the record is all we need; a clean shutdown waits for torch imports
    pool.process.wait(60)
"""


@pytest.mark.slow
def test_real_inductor_compile_worker(recorded, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "pool_job.py").write_text(POOL_SCRIPT)
    records = recorded([sys.executable, "pool_job.py"])
    assert roles(records) == ["COMPILE_WORKER", "TRAINING"], records


RANK_SCRIPT = "import os; assert os.environ['LOCAL_RANK'] == '0'\n"


@pytest.mark.slow
def test_real_torchrun(recorded, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun console script not installed next to this python")
    (tmp_path / "rank.py").write_text(RANK_SCRIPT)
    argv = [str(torchrun), "--standalone", "--nproc-per-node=1", "rank.py"]
    records = recorded(argv)
    assert roles(records) == ["LAUNCHER", "TRAINING"], records
