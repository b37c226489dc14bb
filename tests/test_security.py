"""Security properties of the agent, checked on the code and on real runs.

* inputs are parsed as data only: no pickle / marshal / shelve, no eval / exec of input, YAML
  through a safe loader, no torch.load, no shell=True (a static scan of the sources);
* the startup hook does nothing without TRAINCHECK_MODE, and files in the working directory or
  next to the script cannot take its place;
* a trace holds shapes, dtypes and fingerprints, never tensor values or batch contents;
* output files and directories follow the user's umask, and no directory is world-writable;
* every environment variable the agent reads is documented (settings.ENV_VARS, docs/security.md).
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import MLP, agent_env, collect_mlp_here, run_here

import traincheck_agent
from traincheck_agent.settings import ENV_VARS
from traincheck_agent.trace.snapshot import expand

REPO = Path(__file__).resolve().parents[1]
SOURCES = [REPO / "traincheck_agent", REPO / "sitecustomize_pkg"]
DOC = REPO / "docs" / "security.md"
REAL_PACKAGE = Path(traincheck_agent.__file__).resolve().parent


def _python_files() -> list[Path]:
    return sorted(p for root in SOURCES for p in root.rglob("*.py") if "__pycache__" not in p.parts)


# --- static scan -------------------------------------------------------------------------------

BANNED_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "jsonpickle"}
BANNED_CALLS = ("eval", "exec", "builtins.eval", "builtins.exec", "compile", "__import__",
                "torch.load", "torch.serialization.load", "numpy.load", "np.load")
# The one exec the package has: the .pth line, whose code is a constant of our own (checked below).


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _is_safe_loader(expr: str, safe_classes: set[str]) -> bool:
    """A loader expression naming only safe loaders (SafeLoader, CSafeLoader, or such a subclass)."""
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", expr)) - {"yaml", "getattr"}
    loaders = {n for n in names if n.endswith("Loader") or n in safe_classes}
    return bool(loaders) and all(n in ("SafeLoader", "CSafeLoader") or n in safe_classes for n in loaders)


def _findings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    # Loader classes of this module built on a safe loader (e.g. ``class L(yaml.SafeLoader)``).
    safe_classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
                    and any(_is_safe_loader(ast.unparse(b), set()) for b in n.bases)}
    safe_classes |= {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign)
                     and _is_safe_loader(ast.unparse(n.value), set()) for t in n.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where}: import {a.name}" for a in node.names if a.name.split(".")[0] in BANNED_MODULES]
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] in BANNED_MODULES:
                found.append(f"{where}: from {node.module} import")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            keywords = {k.arg: k.value for k in node.keywords}
            if name in BANNED_CALLS:
                found.append(f"{where}: {name}()")
            elif name.endswith("yaml.load") or name.endswith("yaml.load_all") or name in ("load_all",):
                loader = keywords.get("Loader")
                if loader is None and len(node.args) > 1:
                    loader = node.args[1]
                if loader is None or not _is_safe_loader(ast.unparse(loader), safe_classes):
                    found.append(f"{where}: {name}() without a safe loader")
            elif name.endswith(("yaml.unsafe_load", "yaml.full_load", "yaml.unsafe_load_all")):
                found.append(f"{where}: {name}()")
            elif "shell" in keywords and not (
                isinstance(keywords["shell"], ast.Constant) and keywords["shell"].value is False
            ):
                found.append(f"{where}: {name}(shell=...)")
            elif name in ("os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput"):
                found.append(f"{where}: {name}() runs a shell")
    return found


def test_scan_covers_the_package():
    files = _python_files()
    assert REPO / "traincheck_agent" / "policy" / "loader.py" in files
    assert REPO / "sitecustomize_pkg" / "traincheck_agent_startup.py" in files
    assert len(files) > 50


def test_no_unsafe_deserialisation_eval_or_shell():
    findings = [f for path in _python_files() for f in _findings(path)]
    assert findings == []


def test_scan_catches_what_it_looks_for(tmp_path):
    """The scanner itself: each banned construct is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import pickle\nfrom marshal import loads\nimport yaml, torch, subprocess\n"
        "eval('1')\nexec('x = 1')\nyaml.load(s)\nyaml.load(s, Loader=yaml.Loader)\n"
        "torch.load('f')\nsubprocess.run('ls', shell=True)\nyaml.load(s, Loader=yaml.SafeLoader)\n"
    )
    global REPO
    saved, REPO = REPO, tmp_path
    try:
        found = _findings(bad)
    finally:
        REPO = saved
    assert len(found) == 8, found  # everything but the safe yaml.load


def test_yaml_python_tags_are_refused(tmp_path):
    """A policy asking YAML to build a Python object is a problem report, and nothing runs."""
    from traincheck_agent.policy import load_policies

    marker = tmp_path / "ran"
    policy = tmp_path / "evil.yaml"
    policy.write_text(
        "version: 1\nname: evil\n"
        f"apis: !!python/object/apply:os.system [\"touch {marker}\"]\n"
        f"state: !!python/object/apply:builtins.exec [\"open('{marker}', 'w')\"]\n"
    )
    problems = []
    load_policies([policy], report=problems.append)
    assert problems and "evil.yaml" in str(problems[0])
    assert not marker.exists()


def test_pth_exec_runs_only_its_own_constant_code():
    """The .pth line is the one exec(): its argument is a string literal, not read from anywhere."""
    line = (REPO / "sitecustomize_pkg" / "traincheck_agent.pth").read_text()
    tree = ast.parse(line)
    execs = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _dotted(n.func) == "exec"]
    assert len(execs) == 1 and isinstance(execs[0].args[0], ast.Constant)
    assert "TRAINCHECK_MODE" in line


# --- hostile files next to the program ---------------------------------------------------------

HOSTILE = """
import os, sys
with open(os.environ["HOSTILE_MARKER"], "a") as f:
    f.write(__name__ + "\\n")
"""
PROBE_SCRIPT = """
import json, sys
mods = sorted(m for m in sys.modules if m.startswith("traincheck"))
pkg = sys.modules.get("traincheck_agent")
print(json.dumps({"mods": mods, "pkg": getattr(pkg, "__file__", None)}))
"""


@pytest.fixture(scope="module")
def hostile_dir(tmp_path_factory) -> Path:
    """A working directory holding every file that could stand in for the agent's."""
    root = tmp_path_factory.mktemp("hostile")
    (root / "traincheck_agent_startup.py").write_text(HOSTILE + "def run():\n    pass\n")
    (root / "sitecustomize.py").write_text(HOSTILE)
    (root / "usercustomize.py").write_text(HOSTILE)
    (root / "zz_hostile.pth").write_text("import hostile_pth_module\n")
    (root / "hostile_pth_module.py").write_text(HOSTILE)
    (root / "traincheck_agent.pth").write_text("import hostile_pth_module\n")
    for package in ("traincheck_agent", "traincheck_agent/agent"):
        (root / package).mkdir()
        (root / package / "__init__.py").write_text(HOSTILE)
    (root / "traincheck_agent" / "agent" / "bootstrap.py").write_text(HOSTILE + "def start(mode):\n    pass\n")
    (root / "probe.py").write_text(PROBE_SCRIPT)
    return root


def _run_in(cwd: Path, argv: list[str], mode: str | None, out: Path, marker: Path) -> dict:
    env = agent_env(mode, out, HOSTILE_MARKER=str(marker))
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("mode", [None, "off", "collect", "check"])
@pytest.mark.parametrize("how", ["script", "code"])
def test_files_in_the_working_directory_cannot_replace_the_hook(hostile_dir, tmp_path, mode, how):
    marker = tmp_path / "hostile-ran"
    argv = [str(hostile_dir / "probe.py")] if how == "script" else ["-c", PROBE_SCRIPT]
    seen = _run_in(hostile_dir, argv, mode, tmp_path / "out", marker)
    assert not marker.exists(), marker.read_text()  # no hostile module ever ran
    if mode in (None, "off"):
        assert seen["mods"] == []  # nothing of ours, not even the gate
    else:
        # The installed agent started: its gate and package, from where they are installed.
        assert {"traincheck_agent_startup", "traincheck_agent.agent.bootstrap"} <= set(seen["mods"])
        assert Path(seen["pkg"]).resolve().parent == REAL_PACKAGE


@pytest.mark.slow
@pytest.mark.parametrize("checker", ["thread", "process"])
def test_files_in_the_working_directory_cannot_replace_the_checker(hostile_dir, tmp_path, checker):
    """Check mode with its checker in a child process: that child starts by module name, and in
    the training's folder a ``traincheck_agent`` lying there would be the one it ran."""
    marker = tmp_path / "hostile-ran"
    env = agent_env("check", tmp_path / "out", HOSTILE_MARKER=str(marker), TRAINCHECK_INV="builtin",
                    TRAINCHECK_CHECKER=checker)
    env.pop("PYTHONPATH", None)
    code = "import torch\nx = torch.nn.Linear(2, 2)\nx(torch.ones(1, 2)).sum().backward()\n" + PROBE_SCRIPT
    proc = subprocess.run([sys.executable, "-c", code], cwd=hostile_dir, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists(), marker.read_text()


@pytest.mark.slow
def test_installed_gate_is_the_one_that_runs(hostile_dir, tmp_path):
    code = PROBE_SCRIPT + "print(json.dumps(sys.modules['traincheck_agent_startup'].__file__))\n"
    env = agent_env("collect", tmp_path / "out", HOSTILE_MARKER=str(tmp_path / "m"))
    proc = subprocess.run([sys.executable, "-c", code], cwd=hostile_dir, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    gate = Path(json.loads(proc.stdout.strip().splitlines()[-1])).resolve()
    assert gate.parent != hostile_dir.resolve()
    assert gate.parent.name == "site-packages"
    assert not (tmp_path / "m").exists()


# --- what a trace holds ----------------------------------------------------------------------

SECRET_RUN = """
import json, sys
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2))
with torch.no_grad():  # distinctive weights: 777.xxx
    for i, p in enumerate(model.parameters()):
        p.copy_(777.0 + 0.0137 * torch.arange(p.numel(), dtype=torch.float32).reshape(p.shape) / 100 + i / 1000)
# distinctive batch: 1234.5 .. 1235.5
x = torch.linspace(1234.5, 1235.5, 48 * 6).reshape(48, 6)
y = torch.arange(48) % 2
opt = torch.optim.SGD(model.parameters(), lr=1e-9)
losses = []
for xb, yb in DataLoader(TensorDataset(x, y), batch_size=8):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(xb), yb)
    loss.backward()
    opt.step()
    losses.append(loss.item())
texts = [f"SECRET-TEXT-{i}" for i in range(16)]
for batch in DataLoader(texts, batch_size=4):  # a batch of strings, as text datasets give
    pass
floats = [4321.5 + i / 64 for i in range(16)]
for batch in DataLoader(floats, batch_size=4, collate_fn=list):  # a batch of Python floats
    pass
print(json.dumps({"losses": losses}))
"""


def _numbers(value, key="") -> list[tuple[str, float]]:
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in _numbers(v, str(k))]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v, key)]
    if isinstance(value, float):
        return [(key, value)]
    return []


def _float_lists(value) -> list[list]:
    if isinstance(value, dict):
        return [f for v in value.values() for f in _float_lists(v)]
    if isinstance(value, list):
        own = [value] if sum(isinstance(v, float) for v in value) > 4 else []
        return own + [f for v in value for f in _float_lists(v)]
    return []


def _without_amax(value):
    if isinstance(value, dict):
        return {k: _without_amax(v) for k, v in value.items() if k != "amax"}
    if isinstance(value, list):
        return [_without_amax(v) for v in value]
    return value


@pytest.fixture(scope="module")
def secret_trace(tmp_path_factory) -> tuple[list[dict], list[float]]:
    root = tmp_path_factory.mktemp("secret")
    script = root / "secret_train.py"
    script.write_text(SECRET_RUN)
    proc = subprocess.run([sys.executable, str(script)], env=agent_env("collect", root / "out"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    [trace] = sorted((root / "out").glob("trace_*.jsonl"))
    records = [json.loads(line) for line in trace.read_bytes().splitlines()]
    return records, json.loads(proc.stdout.strip().splitlines()[-1])["losses"]


@pytest.mark.slow
def test_trace_records_tensors_as_shapes_and_fingerprints(secret_trace):
    records, _ = secret_trace
    states = [r for snapshot in records if snapshot["kind"] == "snapshot" for r in expand(snapshot)
              if "data" in r["attrs"]]
    assert states
    for state in states:
        attrs = state["attrs"]
        assert set(attrs["data"]) <= {"h", "zero", "nonfinite", "amax"}
        assert isinstance(attrs["shape"], list) and isinstance(attrs["dtype"], str)
    batches = [r for r in records if r["kind"] == "call" and r["api"].endswith("__next__") and r.get("ret")]
    assert batches
    tensor = batches[0]["ret"]["items"][0]
    assert tensor["shape"] == [8, 6] and "fp" in tensor  # the batch: shape and fingerprint


@pytest.mark.slow
def test_trace_holds_no_tensor_values(secret_trace):
    """No weight or batch value appears in the trace, except a fingerprint's one ``amax``."""
    records, _ = secret_trace
    leaked = [(k, v) for r in records for k, v in _numbers(r)
              if (777.0 <= v <= 778.0 or 1234.0 <= v <= 1236.0) and k != "amax"]
    assert leaked == []
    text = "\n".join(json.dumps(_without_amax(r)) for r in records)
    assert not re.search(r"\b(777|123[45])\.\d", text)  # any float repr of those values
    assert [f for r in records for f in _float_lists(r)] == []


@pytest.mark.slow
def test_recorded_floats_are_the_documented_scalars(secret_trace):
    """The floats a trace of this run holds: fingerprints' amax, the optimizer's scalar
    hyperparameters, and scalar arguments (none of them from the data or the loss)."""
    records, _ = secret_trace
    keys = {k for r in records for k, v in _numbers(r) if not (4321.0 <= v <= 4322.0)}
    # amax; SGD's param-group scalars; the bounds nn.init passes to uniform_ (a, from, to, b)
    assert keys <= {"amax", "lr", "momentum", "dampening", "weight_decay", "a", "b", "from", "to",
                    "gain", "p", "label_smoothing"}, keys


@pytest.mark.slow
def test_loss_values_are_not_recorded(secret_trace):
    records, losses = secret_trace
    assert losses and all(math.isfinite(v) for v in losses)
    values = {v for r in records for _, v in _numbers(r)}
    assert not values & set(losses)


@pytest.mark.slow
def test_batch_contents_that_are_not_tensors_are_not_recorded(secret_trace):
    """A batch of strings (text datasets) or Python numbers is batch content too."""
    records, _ = secret_trace
    text = "\n".join(json.dumps(r) for r in records)
    assert "SECRET-TEXT" not in text, "DataLoader batches of strings are written into the trace"
    leaked = [v for r in records for k, v in _numbers(r) if 4321.0 <= v <= 4322.0]
    assert leaked == [], "DataLoader batches of Python floats are written into the trace"


# --- file modes --------------------------------------------------------------------------------


def _run_with_umask(umask: int, args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: os.umask(umask))


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """A collected clean MLP run (``ref/``) and the invariants learned from it (``inv.json``)."""
    root = tmp_path_factory.mktemp("reference")
    ref = collect_mlp_here(root, "ref", "--steps", "3")
    inv = root / "inv.json"
    infer = subprocess.run([sys.executable, "-m", "traincheck_agent", "infer", str(ref), "-o", str(inv)],
                           capture_output=True, text=True, timeout=120)
    assert infer.returncode == 0, infer.stderr
    return root


@contextmanager
def _umask(umask: int) -> Iterator[None]:
    old = os.umask(umask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture(scope="module")
def umask_runs(reference, tmp_path_factory) -> dict[int, Path]:
    """Collect and check runs under each umask, in this process (the umask is the process's);
    the output directory is two levels below an existing one, so the agent creates both."""
    root = tmp_path_factory.mktemp("umask")
    inv = reference / "inv.json"
    for umask in (0o022, 0o077, 0o000):
        base = root / f"u{umask:03o}"
        base.mkdir()
        os.chmod(base, 0o755)
        with _umask(umask):
            run_here(MLP, "--steps", "3", mode="collect", out=base / "collect" / "deep")
            run_here(MLP, "--steps", "3", "--bug", "no-zero-grad", mode="check", out=base / "check" / "deep",
                     TRAINCHECK_INV=str(inv), TRAINCHECK_CHECK_TRACE="1")
    return {umask: root / f"u{umask:03o}" for umask in (0o022, 0o077, 0o000)}


def _created(base: Path) -> tuple[list[Path], list[Path]]:
    dirs = [p for p in base.rglob("*") if p.is_dir()]
    files = [p for p in base.rglob("*") if p.is_file()]
    return dirs, files


@pytest.mark.slow
@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_output_modes_follow_the_umask(umask_runs, umask):
    dirs, files = _created(umask_runs[umask])
    assert len(dirs) == 4  # collect/, collect/deep/, check/, check/deep/
    names = {p.name.split("_")[0].split("-")[0] for p in files}
    assert names == {"trace", "violations"}, files
    for d in dirs:
        assert stat.S_IMODE(d.stat().st_mode) == 0o777 & ~umask, d
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~umask, f


@pytest.mark.slow
def test_no_world_writable_output_even_with_umask_000(umask_runs):
    dirs, files = _created(umask_runs[0o000])
    assert files
    writable = [f"{p} {stat.S_IMODE(p.stat().st_mode):o}" for p in dirs + files
                if p.stat().st_mode & stat.S_IWOTH]
    assert writable == [], "world-writable output under umask 000"


@pytest.mark.slow
def test_cli_check_output_directories_follow_the_documented_mode(reference, tmp_path):
    out = tmp_path / "cli" / "deep"
    proc = _run_with_umask(0o000, ["-m", "traincheck_agent", "check", str(reference / "ref"), "-i",
                                   str(reference / "inv.json"), "--out", str(out)], dict(os.environ))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, 1), err
    assert [oct(stat.S_IMODE(d.stat().st_mode)) for d in (out.parent, out)] == ["0o775", "0o775"]


# --- files planted in a shared output directory -------------------------------------------------


@pytest.mark.slow
def test_check_mode_does_not_write_through_a_planted_link(reference, tmp_path):
    """Someone who can write to the output directory links violations-0.jsonl to a file of the
    user's: the file stays as it was, the violations still reach stderr, training finishes."""
    out = tmp_path / "shared"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (out / "violations-0.jsonl").symlink_to(victim)
    proc = subprocess.run([sys.executable, MLP, "--steps", "3", "--bug", "no-zero-grad"],
                          env=agent_env("check", out, TRAINCHECK_INV=str(reference / "inv.json")),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert victim.read_text() == "precious\n"
    assert (out / "violations-0.jsonl").is_symlink()
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("[traincheck] warning:")]
    assert warnings == [f"[traincheck] warning: cannot write violations to {out / 'violations-0.jsonl'} (a symbolic "
                        "link is in its place; only a regular file is written to); they are shown on stderr only"]
    assert "[traincheck] violation at rank 0 step 1:" in proc.stderr


@pytest.mark.parametrize("planted", ["symlink", "fifo", "directory"])
def test_output_files_are_opened_only_when_regular(planted, tmp_path):
    from traincheck_agent.output_files import NotARegularFile, open_append

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    path = tmp_path / "violations-0.jsonl"
    {"symlink": lambda: path.symlink_to(victim), "fifo": lambda: os.mkfifo(path), "directory": path.mkdir}[planted]()
    with pytest.raises(NotARegularFile, match="is in its place"):  # a FIFO without a reader: not waited on
        open_append(path)
    assert victim.read_text() == "precious\n"


# --- documentation -----------------------------------------------------------------------------


def _env_names_read_by_the_package() -> set[str]:
    names = set()
    for path in _python_files():
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r"""(?:environ|env)(?:\.get\(|\[)\s*["']([A-Z_][A-Z0-9_]*)["']""", text))
        names |= set(re.findall(r"""getenv\(\s*["']([A-Z_][A-Z0-9_]*)["']""", text))
        names |= set(re.findall(r"""_(?:float|flag|choice|int)\((?:os\.environ|env), ["']([A-Z_][A-Z0-9_]*)["']""",
                                text))
    return names


def test_every_env_var_read_is_documented():
    read = _env_names_read_by_the_package()
    assert {"TRAINCHECK_MODE", "TRAINCHECK_OUT", "TRAINCHECK_DEBUG"} <= read
    doc = DOC.read_text(encoding="utf-8")
    assert [name for name in sorted(read) if f"`{name}`" not in doc] == []
    assert [name for name in ENV_VARS if f"`{name}`" not in doc] == []
    ours = {n for n in read if n.startswith("TRAINCHECK_")}
    assert ours - set(ENV_VARS) <= {"TRAINCHECK_LAUNCHER_RUN_ID"}, ours - set(ENV_VARS)
