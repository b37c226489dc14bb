"""Decides from the command line whether this process is one the agent should instrument.

The startup hook runs in every Python process of the environment: launchers, compile workers,
pip. Only training processes (and multiprocessing children, which may be training ranks) should
be traced. The decision is made while site.py processes .pth files, when ``sys.argv`` is not set
yet but ``sys.orig_argv`` (Python 3.10+) holds the interpreter's full command line, so this
module parses that itself and imports only ``enum`` and ``collections.abc`` beyond what site.py
has already loaded.

The argv shapes matched here come from the programs that start these processes: torch's
elastic launcher and inductor compile/autotune workers, DeepSpeed's runner and per-node
launcher, Accelerate's CLI, the stdlib's multiprocessing spawn/forkserver/resource tracker, pip's
build hook runner.
"""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Mapping, Sequence


class ProcessRole(enum.Enum):
    """What kind of process this is, as far as instrumentation is concerned."""

    TRAINING = "training"  # instrument
    LAUNCHER = "launcher"  # starts the training processes; runs no model code itself
    SPAWN_CHILD = "spawn_child"  # multiprocessing child: a training rank or a DataLoader worker
    COMPILE_WORKER = "compile_worker"  # torch.compile helper process
    TOOL = "tool"  # pip, the traincheck CLI, the skip list: never instrument


class _Command:
    """The interpreter command line split the way CPython reads it."""

    __slots__ = ("interpreter", "kind", "target", "args")

    def __init__(self, interpreter: str, kind: str, target: str, args: Sequence[str]) -> None:
        self.interpreter = interpreter
        self.kind = kind  # "script" | "module" | "code" | "stdin" | "none"
        self.target = target  # script path, module name or code string
        self.args = tuple(args)  # what the program sees as sys.argv[1:]


def _parse(argv: Sequence[str]) -> _Command:
    """Skip interpreter options (grouped flags, -W/-X values) to find what is being run."""
    interpreter = argv[0] if argv else ""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if arg == "-":
            return _Command(interpreter, "stdin", "-", argv[i + 1 :])
        if arg.startswith("--"):
            i += 2 if arg == "--check-hash-based-pycs" else 1
            continue
        if not arg.startswith("-"):
            break
        j = 1
        while j < len(arg):
            flag = arg[j]
            if flag in "cm":
                value, rest = arg[j + 1 :], i + 1
                if not value:
                    value = argv[i + 1] if i + 1 < len(argv) else ""
                    rest = i + 2
                return _Command(
                    interpreter, "code" if flag == "c" else "module", value, argv[rest:]
                )
            if flag in "WX":
                if j + 1 == len(arg):
                    i += 1  # the value is the next argument
                break
            j += 1
        i += 1
    if i < len(argv):
        return _Command(interpreter, "script", argv[i], argv[i + 1 :])
    return _Command(interpreter, "none", "", ())


def _program_name(path: str) -> str:
    """Console-script name of a path: basename, lower case, Windows launcher suffix removed.

    ``.py`` stays on: ``python ds.py`` runs the user's script, not DeepSpeed's ``ds`` launcher.
    """
    name = path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].lower()
    for suffix in ("-script.pyw", "-script.py", ".exe"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _is_pip_program(name: str) -> bool:
    """pip, pip3, pip3.11 (the console scripts pip installs)."""
    if name in ("pip", "pip3"):
        return True
    return name.startswith("pip3.") and name[5:].isdigit()


def _module_matches(module: str, names: Sequence[str]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


def _first_positional(args: Sequence[str]) -> str:
    return next((a for a in args if not a.startswith("-")), "")


_LAUNCHER_MODULES = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torch.distributed.launch",
    "deepspeed.launcher.runner": "deepspeed launcher",
    "deepspeed.launcher.launch": "deepspeed per-node launcher",
    "accelerate.commands.launch": "accelerate launch",
}
_LAUNCHER_PROGRAMS = {
    "torchrun": "torchrun",
    "deepspeed": "deepspeed launcher",
    "deepspeed.pt": "deepspeed launcher",
    "ds": "deepspeed launcher",
    "accelerate-launch": "accelerate launch",
}
_LAUNCHER_SCRIPT_TAILS = {
    "/torch/distributed/run.py": "torchrun",
    "/torch/distributed/launch.py": "torch.distributed.launch",
    "/deepspeed/launcher/runner.py": "deepspeed launcher",
    "/deepspeed/launcher/launch.py": "deepspeed per-node launcher",
    "/accelerate/commands/launch.py": "accelerate launch",
}
_TOOL_MODULES = ("pip", "ensurepip", "venv", "traincheck_agent.cli", "torch.utils.collect_env")
_TOOL_PROGRAMS = (
    "traincheck",
    "ds_report",
    "accelerate-config",
    "accelerate-estimate-memory",
    "accelerate-merge-weights",
)
_TOOL_PATH_PARTS = (
    "/pyproject_hooks/_in_process/",  # build backend hooks run by pip and build
    "/pip/_vendor/",
    "/pip/__pip-runner__.py",  # pip re-running itself in a build environment
    "/traincheck_agent/cli/",
)
_COMPILE_MODULES = ("torch._inductor.compile_worker", "torch._vendor.quack._compile_worker")
_COMPILE_PATH_PARTS = (
    "/torch/_inductor/compile_worker/",  # SubprocPool: sys.executable .../__main__.py --kind=...
)
_COMPILE_SCRIPT_TAILS = ("/torch/_inductor/__autotune_main__.py",)


def _classify_spawn(command: _Command, argv: Sequence[str]) -> tuple[ProcessRole, str] | None:
    """multiprocessing (and loky) children, recognised by the code they are started with."""
    if "--multiprocessing-fork" in argv[1:]:
        return ProcessRole.SPAWN_CHILD, "multiprocessing spawn child"
    if command.kind == "code":
        code = command.target
        if "resource_tracker import main" in code:
            return ProcessRole.TOOL, "multiprocessing resource tracker"
        if "multiprocessing.forkserver import main" in code:
            return ProcessRole.SPAWN_CHILD, "multiprocessing forkserver"
        if ".spawn import spawn_main" in code:
            return ProcessRole.SPAWN_CHILD, "multiprocessing spawn child"
    if command.kind == "module" and command.target.endswith("loky.backend.popen_loky_posix"):
        return ProcessRole.SPAWN_CHILD, "loky worker"
    return None


def _classify_compile(command: _Command, path: str) -> tuple[ProcessRole, str] | None:
    """Helper processes torch.compile starts with a plain ``sys.executable`` command line."""
    if command.kind == "module" and _module_matches(command.target, _COMPILE_MODULES):
        return ProcessRole.COMPILE_WORKER, f"compile worker -m {command.target}"
    if command.kind == "script":
        if any(part in path for part in _COMPILE_PATH_PARTS):
            return ProcessRole.COMPILE_WORKER, "inductor compile worker"
        if path.endswith(_COMPILE_SCRIPT_TAILS):
            return ProcessRole.COMPILE_WORKER, "inductor autotune worker"
        if path.endswith("/generate_kernel.py") and "halide_kernel" in command.args:
            return ProcessRole.COMPILE_WORKER, "inductor halide generator"
    if command.kind == "code" and "cdll.LoadLibrary(" in command.target:
        return ProcessRole.COMPILE_WORKER, "inductor library load probe"
    return None


def _classify_launcher_or_tool(command: _Command, path: str) -> tuple[ProcessRole, str] | None:
    program = _program_name(path) if command.kind == "script" else ""
    module = command.target if command.kind == "module" else ""
    if module in _LAUNCHER_MODULES:
        return ProcessRole.LAUNCHER, _LAUNCHER_MODULES[module]
    if program in _LAUNCHER_PROGRAMS:
        return ProcessRole.LAUNCHER, _LAUNCHER_PROGRAMS[program]
    for tail, reason in _LAUNCHER_SCRIPT_TAILS.items():
        if command.kind == "script" and path.endswith(tail):
            return ProcessRole.LAUNCHER, reason
    if program == "accelerate" or module == "accelerate.commands.accelerate_cli":
        sub = _first_positional(command.args)
        if sub == "launch":
            return ProcessRole.LAUNCHER, "accelerate launch"
        return ProcessRole.TOOL, f"accelerate {sub}".rstrip()
    if module and (_module_matches(module, _TOOL_MODULES) or module == "traincheck_agent"):
        return ProcessRole.TOOL, f"-m {module}"
    if program in _TOOL_PROGRAMS or _is_pip_program(program):
        return ProcessRole.TOOL, program
    if command.kind == "script" and any(part in path for part in _TOOL_PATH_PARTS):
        return ProcessRole.TOOL, "build or install helper"
    return None


def _classify_command(argv: Sequence[str], skip: Sequence[str]) -> tuple[ProcessRole, str]:
    if not argv:
        return ProcessRole.TRAINING, "no command line"
    command = _parse(argv)
    path = command.target.replace("\\", "/") if command.kind == "script" else ""
    if skip:
        candidates = {_program_name(command.interpreter)}
        if command.kind == "script":
            program = _program_name(path)
            candidates.update((program, program.removesuffix(".py"), path.rsplit("/", 1)[-1]))
        for name in skip:
            if name in candidates or name.lower() in candidates:
                return ProcessRole.TOOL, f"skip list: {name}"
            if command.kind == "module" and _module_matches(command.target, (name,)):
                return ProcessRole.TOOL, f"skip list: {name}"
    for rule in (_classify_spawn(command, argv), _classify_compile(command, path)):
        if rule is not None:
            return rule
    found = _classify_launcher_or_tool(command, path)
    if found is not None:
        return found
    return ProcessRole.TRAINING, "default"


def _read_parent_argv() -> list[str] | None:
    """The parent's command line from /proc (Linux); None where that is not available."""
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [part.decode("utf-8", "surrogateescape") for part in raw.split(b"\0") if part]


def classify(
    orig_argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    extra_skip: Sequence[str] = (),
    *,
    parent_argv: Sequence[str] | None = None,
) -> tuple[ProcessRole, str]:
    """Return this process's role and a short reason, for the agent's debug line.

    ``orig_argv`` defaults to ``sys.orig_argv``. Names in ``extra_skip`` and in
    TRAINCHECK_SKIP_PROGRAMS (program basenames or module names) make the process a TOOL. A
    spawn child whose parent is an inductor compile worker is a COMPILE_WORKER; the parent's
    command line is read from /proc only when ``orig_argv`` is not given (tests pass
    ``parent_argv`` instead).
    """
    env = os.environ if environ is None else environ
    skip = [s for s in extra_skip if s]
    skip += [s for s in env.get("TRAINCHECK_SKIP_PROGRAMS", "").split(os.pathsep) if s]
    read_parent = orig_argv is None and parent_argv is None
    argv = list(getattr(sys, "orig_argv", sys.argv) if orig_argv is None else orig_argv)
    role, reason = _classify_command(argv, skip)
    if role is ProcessRole.SPAWN_CHILD:
        parent = _read_parent_argv() if read_parent else parent_argv
        if parent:
            parent_role, parent_reason = _classify_command(parent, ())
            if parent_role is ProcessRole.COMPILE_WORKER:
                return ProcessRole.COMPILE_WORKER, f"{reason} of {parent_reason}"
    return role, reason
