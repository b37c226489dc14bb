"""Configuration from environment variables, parsed once per process.

Every variable the agent reads is listed in ``ENV_VARS`` (the README's configuration table is
written from the same facts). A malformed value never stops training: it gets one warning that
names the variable, and the default is used.
"""

from __future__ import annotations

import math
import os
import re
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from traincheck_agent.env_flags import env_flag
from traincheck_agent.messages import warn
from traincheck_agent.policy.parse_cache import default_cache_dir

MODES = ("off", "collect", "check")
ACTIVE_MODES = ("collect", "check")
ACTIONS = ("log", "raise", "abort")
CHECKERS = ("auto", "process", "thread")  # TRAINCHECK_CHECKER; the first is the default
DEFAULT_MAX_TRACE_MB = 4096

ENV_VARS: dict[str, str] = {
    "TRAINCHECK_MODE": "off (default) | collect | check. Nothing happens unless set.",
    "TRAINCHECK_OUT": "Directory for traces and violation logs (default ./traincheck_out).",
    "TRAINCHECK_INV": "check mode: invariants files, ':'-separated; 'builtin' names the built-in pack of library "
                      "invariants, which is also used when this is unset (a bad file is skipped with a warning).",
    "TRAINCHECK_ACTION": "check mode: log (default) | raise | abort, what a violation does to the training process.",
    "TRAINCHECK_CHECKER": "check mode: auto (default) | process | thread, where the online checker runs; "
                          "auto = a child process when a CPU core is left over by torch's threads "
                          "(raise and abort always check in the training process).",
    "TRAINCHECK_WAIVE": "check mode: a waivers file (docs/waivers.md); the violations it covers are logged as "
                        "waived, never reported as failures (a bad file is ignored with a warning).",
    "TRAINCHECK_CHECK_TRACE": "check mode: 1 = also write the trace of what was checked (yes/no, default 0).",
    "TRAINCHECK_POLICY": "Extra policy files, ':'-separated; later files add to or override earlier ones.",
    "TRAINCHECK_NO_DEFAULT_POLICIES": "1 = load only the files in TRAINCHECK_POLICY (yes/no, default 0).",
    "TRAINCHECK_RUN_ID": "Run id shared by all ranks. If unset, each node's launcher makes one for its ranks; "
                         "ranks of a multi-node torchrun rendezvous use the rendezvous id instead "
                         "(TORCHELASTIC_RUN_ID, the same on every node).",
    "TRAINCHECK_FLUSH_INTERVAL": "Seconds between background flushes of the trace, or hand-overs to the "
                                 "checker in check mode (default 0.5).",
    "TRAINCHECK_FLUSH_RECORDS": "Buffered records that trigger an early flush (default 2000).",
    "TRAINCHECK_MAX_TRACE_MB": "Size limit of each process's trace file in MiB (default 4096; 0 = none). Past it "
                               "records are not written (check mode still checks them), one warning says so "
                               "and a note at the end of the file counts them.",
    "TRAINCHECK_CACHE_DIR": "Where parsed policy files are kept between runs, by content hash (default "
                            "$XDG_CACHE_HOME/traincheck-agent or ~/.cache/traincheck-agent; off = parse every time).",
    "TRAINCHECK_SKIP_PROGRAMS": "Extra ':'-separated program or module names the agent never activates in.",
    "TRAINCHECK_DEBUG": "1 = print the agent's debug lines (yes/no, default 0).",
    "TRAINCHECK_INJECT_FAULT": "Testing the agent only: stages whose work fails on purpose, ','-separated, "
                               "each optionally ':N' for its first N entries (wrap, record, describe, "
                               "fingerprint, snapshot, writer, checker, violation-log, exchange).",
}


def _float(env: Mapping[str, str], name: str, default: float, minimum: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        warn(f"{name}={raw!r} is not a number; using {default}")
        return default
    if not math.isfinite(value):
        warn(f"{name}={raw!r} is not a finite number; using {default}")
        return default
    if value < minimum:
        warn(f"{name}={raw!r} is below {minimum}; using {default}")
        return default
    return value


def _split_paths(raw: str | None) -> tuple[Path, ...]:
    if not raw:
        return ()
    return tuple(Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip())


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """The value of ``name`` among ``choices`` (case-insensitive); the first choice when unset
    or unknown (with a warning)."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return choices[0]
    value = raw.strip().lower()
    if value not in choices:
        warn(f"{name}={raw!r} is not one of {', '.join(choices)}; using {choices[0]}")
        return choices[0]
    return value


def _one_path(env: Mapping[str, str], name: str) -> Path | None:
    """The single file named by ``name``; None when unset. A value that names several files
    (``:``-separated) gets a warning and is not used."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    if os.pathsep in raw:
        warn(f"{name}={raw!r} names more than one file ({os.pathsep!r}-separated); it takes one, so none is used")
        return None
    return Path(raw).expanduser()


def new_run_id() -> str:
    """A run id that sorts by start time; os.urandom leaves the user's RNG streams untouched."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + os.urandom(3).hex()


# Set by a launcher next to the TRAINCHECK_RUN_ID it made up (the user did not choose one).
LAUNCHER_RUN_ID = "TRAINCHECK_LAUNCHER_RUN_ID"
_UNSAFE_IN_NAMES = re.compile(r"[^A-Za-z0-9._-]+")


def run_id_from(env: Mapping[str, str]) -> str:
    """The user's TRAINCHECK_RUN_ID; else, in a rank of a torchrun rendezvous over several nodes,
    the rendezvous id (each node's launcher would have made its own); else the id this node's
    launcher exported; else a new one."""
    own = env.get("TRAINCHECK_RUN_ID") or ""
    if own and env.get(LAUNCHER_RUN_ID) != own:
        return own
    rendezvous = env.get("TORCHELASTIC_RUN_ID") or ""
    try:
        nodes = int(env.get("GROUP_WORLD_SIZE") or 1)
    except ValueError:
        nodes = 1
    if nodes > 1 and rendezvous not in ("", "none"):
        return "rdzv-" + _UNSAFE_IN_NAMES.sub("_", rendezvous)[:64]
    return own or new_run_id()


def normalise_mode(raw: str | None) -> str | None:
    """Return the mode named by ``raw``, "off" when unset/empty, or None when unknown."""
    if raw is None:
        return "off"
    value = raw.strip().lower()
    if value in ("", "0", "false", "no", "none"):
        return "off"
    return value if value in MODES else None


class Settings(NamedTuple):
    """What the environment asks of the agent, read once (``from_env``)."""

    mode: str
    out_dir: Path
    policy_files: tuple[Path, ...] = ()
    use_default_policies: bool = True
    run_id: str = ""  # from_env always sets it
    flush_interval_s: float = 0.5
    flush_max_records: int = 2000
    max_trace_bytes: int = DEFAULT_MAX_TRACE_MB << 20  # 0: no limit
    skip_programs: tuple[str, ...] = ()
    host: str = ""  # from_env always sets it
    # Check mode: the invariants files, what a violation does, and whether to also write the trace.
    invariant_files: tuple[Path, ...] = ()
    action: str = "log"
    check_trace: bool = False
    # Where the online checker runs: a child process, a thread of this one, or "auto" (a child
    # process when a core is left over, see agent.checking.checker_process.spare_core).
    checker: str = "auto"
    # Check mode: the waivers file (check.waivers); None: no violation is waived.
    waivers_file: Path | None = None
    # Where parsed policy files are kept between processes (policy.parse_cache); None: nowhere.
    cache_dir: Path | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, mode: str | None = None) -> Settings:
        env = os.environ if env is None else env
        resolved_mode = mode or normalise_mode(env.get("TRAINCHECK_MODE")) or "off"
        skip = tuple(s for s in env.get("TRAINCHECK_SKIP_PROGRAMS", "").split(os.pathsep) if s)
        return cls(
            mode=resolved_mode,
            out_dir=Path(env.get("TRAINCHECK_OUT") or "traincheck_out").expanduser(),
            policy_files=_split_paths(env.get("TRAINCHECK_POLICY")),
            use_default_policies=not env_flag(env, "TRAINCHECK_NO_DEFAULT_POLICIES"),
            run_id=run_id_from(env),
            host=socket.gethostname(),
            flush_interval_s=_float(env, "TRAINCHECK_FLUSH_INTERVAL", 0.5, 0.01),
            flush_max_records=int(_float(env, "TRAINCHECK_FLUSH_RECORDS", 2000, 1)),
            max_trace_bytes=int(_float(env, "TRAINCHECK_MAX_TRACE_MB", DEFAULT_MAX_TRACE_MB, 0) * 2**20),
            skip_programs=skip,
            invariant_files=_split_paths(env.get("TRAINCHECK_INV")),
            action=_choice(env, "TRAINCHECK_ACTION", ACTIONS) if resolved_mode == "check" else "log",
            checker=_choice(env, "TRAINCHECK_CHECKER", CHECKERS) if resolved_mode == "check" else "thread",
            check_trace=env_flag(env, "TRAINCHECK_CHECK_TRACE") if resolved_mode == "check" else False,
            waivers_file=_one_path(env, "TRAINCHECK_WAIVE") if resolved_mode == "check" else None,
            cache_dir=default_cache_dir(env),
        )
