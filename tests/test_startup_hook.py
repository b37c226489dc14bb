"""The startup hook (.pth line, .start entry point, gate module) in real interpreter processes.

Each test starts Python from a bare venv whose site-packages holds copies of the hook files, so
site.py processes them exactly as after an install. The agent itself is replaced by a stand-in
``traincheck_agent.agent.bootstrap`` in a temporary directory on PYTHONPATH.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from traincheck_agent.settings import normalise_mode

REPO = Path(__file__).resolve().parents[1]
HOOK_DIR = REPO / "sitecustomize_pkg"
HOOK_FILES = ("traincheck_agent.pth", "traincheck_agent.start", "traincheck_agent_startup.py")
OFF_VALUES = [None, "", "  ", "off", "OFF", "0", "false", "no", "none"]
BOGUS_LINE = (
    "[traincheck] warning: TRAINCHECK_MODE=bogus is not one of off, collect, check; "
    "the agent stays off"
)
# The child reports which of our modules got imported, then proves the user's code ran.
PROBE = (
    "import json, sys; "
    "print(json.dumps(sorted(m for m in sys.modules if m.startswith('traincheck')))); "
    "print('user code ran')"
)

STANDIN_BOOTSTRAP = """
import os


def start(mode):
    behaviour = os.environ.get("STANDIN_BEHAVIOUR", "ok")
    if behaviour == "raise":
        raise RuntimeError("stand-in failure\\nsecond line")
    if behaviour == "exit":
        raise SystemExit(3)
    if behaviour == "missing-dependency":
        import traincheck_no_such_dependency  # noqa: F401
    print("STANDIN start", mode, flush=True)
"""


def clean_env(**extra: str | None) -> dict[str, str]:
    """The test's environment without anything that could switch the agent on by accident."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TRAINCHECK_") and k not in ("PYTHONPATH", "PYTHONHOME")
    }
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def make_venv(path: Path) -> tuple[Path, Path]:
    """A venv without pip (fast to make); returns its python and its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        env=clean_env(),
    )
    return python, Path(out.stdout.strip())


def install_hook(site_dir: Path, files: tuple[str, ...] = HOOK_FILES) -> None:
    for name in files:
        shutil.copy2(HOOK_DIR / name, site_dir / name)


def run_python(
    python: Path,
    code: str = PROBE,
    mode: str | None = None,
    pythonpath: Path | None = None,
    **extra: str,
) -> subprocess.CompletedProcess[str]:
    env = clean_env(TRAINCHECK_MODE=mode, PYTHONPATH=str(pythonpath) if pythonpath else None)
    env.update(extra)
    # cwd: a neutral directory, so that "-c" code cannot import the real package from the repo
    return subprocess.run(
        [str(python), "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=python.parent,
        timeout=60,
    )


def stderr_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


def imported(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return json.loads(proc.stdout.splitlines()[-2])


@pytest.fixture(scope="module")
def hook_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    python, site_dir = make_venv(tmp_path_factory.mktemp("hookvenv") / "venv")
    install_hook(site_dir)
    return python, site_dir


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding a fake traincheck_agent package whose bootstrap only reports."""
    root = tmp_path_factory.mktemp("standin")
    agent = root / "traincheck_agent" / "agent"
    agent.mkdir(parents=True)
    (root / "traincheck_agent" / "__init__.py").write_text("")
    (agent / "__init__.py").write_text("")
    (agent / "bootstrap.py").write_text(STANDIN_BOOTSTRAP)
    return root


def load_gate() -> types.ModuleType:
    """A private copy of the gate module, imported from the source tree."""
    spec = importlib.util.spec_from_file_location(
        "gate_under_test", HOOK_DIR / "traincheck_agent_startup.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the files themselves ------------------------------------------------------------------


def test_pth_is_one_guarded_import_line() -> None:
    lines = (HOOK_DIR / "traincheck_agent.pth").read_text().splitlines()
    assert len(lines) == 1
    line = lines[0]
    assert line.startswith("import ")  # site.py executes only lines starting like this
    compile(line, "traincheck_agent.pth", "exec")
    assert "TRAINCHECK_MODE" in line and "traincheck_agent_startup" in line


def test_pth_off_values_match_gate_and_settings() -> None:
    line = (HOOK_DIR / "traincheck_agent.pth").read_text()
    match = re.search(r"not in (\([^)]*\))", line)
    assert match is not None
    pth_off = set(ast.literal_eval(match.group(1)))
    gate = load_gate()
    assert pth_off == set(gate._OFF_VALUES)
    for value in [*OFF_VALUES, "collect", " Check ", "CHECK", "bogus", "1", "on", "true"]:
        assert gate._resolve_mode(value) == normalise_mode(value), value


def test_start_file_names_the_gate_entry_point() -> None:
    lines = (HOOK_DIR / "traincheck_agent.start").read_text().splitlines()
    assert [ln for ln in lines if ln.strip() and not ln.startswith("#")] == [
        "traincheck_agent_startup:run"
    ]


# --- mode off: inert ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mode", OFF_VALUES)
def test_mode_off_imports_nothing_and_prints_nothing(
    hook_venv: tuple[Path, Path], standin: Path, mode: str | None
) -> None:
    python, _ = hook_venv
    proc = run_python(python, mode=mode, pythonpath=standin)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert imported(proc) == []  # not even the gate
    assert "STANDIN" not in proc.stdout


# --- unknown mode ---------------------------------------------------------------------------


@pytest.mark.slow
def test_unknown_mode_warns_once_and_stays_off(hook_venv: tuple[Path, Path], standin: Path) -> None:
    python, _ = hook_venv
    proc = run_python(python, mode="bogus", pythonpath=standin)
    assert proc.returncode == 0
    assert stderr_lines(proc) == [BOGUS_LINE]
    assert imported(proc) == ["traincheck_agent_startup"]  # the gate, not the package
    assert "STANDIN" not in proc.stdout


@pytest.mark.slow
def test_unknown_mode_value_is_printed_on_one_line(hook_venv: tuple[Path, Path]) -> None:
    python, _ = hook_venv
    proc = run_python(python, mode="col\nlect")
    assert stderr_lines(proc) == [
        "[traincheck] warning: TRAINCHECK_MODE=col lect is not one of off, collect, check; "
        "the agent stays off"
    ]
    proc = run_python(python, mode="\x1b]0;owned\x07col\x9blect")
    assert stderr_lines(proc) == [
        "[traincheck] warning: TRAINCHECK_MODE=\\x1b]0;owned\\x07col\\x9blect is not one of off, "
        "collect, check; the agent stays off"
    ]


# --- active modes ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "expected"), [("collect", "collect"), (" Check ", "check")])
def test_active_mode_starts_bootstrap_once(
    hook_venv: tuple[Path, Path], standin: Path, mode: str, expected: str
) -> None:
    python, _ = hook_venv
    proc = run_python(python, mode=mode, pythonpath=standin)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.count("STANDIN start") == 1
    assert f"STANDIN start {expected}" in proc.stdout
    assert proc.stdout.rstrip().endswith("user code ran")


@pytest.mark.slow
def test_hook_processed_twice_starts_once(tmp_path: Path, standin: Path) -> None:
    python, site_dir = make_venv(tmp_path / "venv")
    install_hook(site_dir)
    shutil.copy2(HOOK_DIR / "traincheck_agent.pth", site_dir / "zz_second_copy.pth")
    code = f"import site; site.addsitedir({str(site_dir)!r}); {PROBE}"
    proc = run_python(python, code, mode="collect", pythonpath=standin)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("STANDIN start") == 1
    assert proc.stderr == ""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        ("raise", "RuntimeError: stand-in failure second line"),
        ("exit", "SystemExit: 3"),
        (
            "missing-dependency",
            "ModuleNotFoundError: No module named 'traincheck_no_such_dependency'",
        ),
    ],
)
def test_failing_start_is_one_warning_and_python_continues(
    hook_venv: tuple[Path, Path], standin: Path, behaviour: str, expected: str
) -> None:
    python, _ = hook_venv
    proc = run_python(python, mode="collect", pythonpath=standin, STANDIN_BEHAVIOUR=behaviour)
    assert proc.returncode == 0
    assert stderr_lines(proc) == [f"[traincheck] warning: agent not started: {expected}"]
    assert proc.stdout.rstrip().endswith("user code ran")


@pytest.mark.slow
def test_package_missing_is_one_warning(hook_venv: tuple[Path, Path]) -> None:
    python, _ = hook_venv
    proc = run_python(python, mode="check")
    assert proc.returncode == 0
    lines = stderr_lines(proc)
    assert len(lines) == 1
    assert lines[0].startswith("[traincheck] warning: agent not started: ModuleNotFoundError: ")
    assert proc.stdout.rstrip().endswith("user code ran")


# --- half-removed install: .pth without the gate --------------------------------------------


@pytest.fixture(scope="module")
def pth_only_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python, site_dir = make_venv(tmp_path_factory.mktemp("pthonly") / "venv")
    install_hook(site_dir, ("traincheck_agent.pth", "traincheck_agent.start"))
    return python


@pytest.mark.slow
@pytest.mark.parametrize("mode", [None, "", "off"])
def test_gate_missing_mode_off_is_silent(pth_only_venv: Path, mode: str | None) -> None:
    proc = run_python(pth_only_venv, mode=mode)
    assert proc.returncode == 0
    assert proc.stderr == ""
    assert proc.stdout.rstrip().endswith("user code ran")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["collect", "check", "bogus"])
def test_gate_missing_mode_on_is_one_line(pth_only_venv: Path, standin: Path, mode: str) -> None:
    proc = run_python(pth_only_venv, mode=mode, pythonpath=standin)
    assert proc.returncode == 0
    assert stderr_lines(proc) == [
        "[traincheck] warning: agent not started: ModuleNotFoundError: "
        "No module named 'traincheck_agent_startup'"
    ]
    assert "STANDIN" not in proc.stdout
    assert proc.stdout.rstrip().endswith("user code ran")


# --- PEP 829 path: what Python 3.15+ does with the .start file -------------------------------


@pytest.mark.slow
def test_start_entry_point_resolves_and_runs(tmp_path: Path, standin: Path) -> None:
    """Without the .pth, call the .start entry point the way 3.15's site.py does."""
    python, site_dir = make_venv(tmp_path / "venv")
    install_hook(site_dir, ("traincheck_agent.start", "traincheck_agent_startup.py"))
    code = (
        "import pkgutil, sys; "
        f"entry = open({str(site_dir / 'traincheck_agent.start')!r}).read().strip(); "
        "fn = pkgutil.resolve_name(entry); fn(); fn(); "
        f"{PROBE}"
    )
    proc = run_python(python, code, mode="collect", pythonpath=standin)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("STANDIN start collect") == 1
    unset = run_python(python, code, pythonpath=standin)
    assert unset.stderr == "" and "STANDIN" not in unset.stdout


# --- gate unit checks (in this process) -----------------------------------------------------


def _fake_bootstrap(monkeypatch: pytest.MonkeyPatch, start: object) -> None:
    import traincheck_agent.agent as agent_pkg

    fake = types.ModuleType("traincheck_agent.agent.bootstrap")
    fake.start = start  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "traincheck_agent.agent.bootstrap", fake)
    monkeypatch.setattr(agent_pkg, "bootstrap", fake, raising=False)


def test_run_passes_keyboard_interrupt(monkeypatch: pytest.MonkeyPatch) -> None:
    def start(mode: str) -> None:
        raise KeyboardInterrupt

    _fake_bootstrap(monkeypatch, start)
    monkeypatch.setenv("TRAINCHECK_MODE", "collect")
    gate = load_gate()
    with pytest.raises(KeyboardInterrupt):
        gate.run()
    gate.run()  # the second call is a no-op even after a failure


def test_run_survives_missing_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINCHECK_MODE", "bogus")
    monkeypatch.setattr(sys, "stderr", None)
    load_gate().run()


def test_run_survives_exception_with_broken_str(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Weird(Exception):
        def __str__(self) -> str:
            raise ValueError("no text")

    def start(mode: str) -> None:
        raise Weird

    _fake_bootstrap(monkeypatch, start)
    monkeypatch.setenv("TRAINCHECK_MODE", "check")
    load_gate().run()
    assert capsys.readouterr().err == (
        "[traincheck] warning: agent not started: Weird: <unprintable>\n"
    )
