"""The built wheel (and editable wheel) put the startup hook in place, stay inert without a mode,
survive missing dependencies, and take the hook away again on uninstall.

One wheel is built per test session; each scenario installs it into a fresh venv made without
pip (fast) and drives it with this environment's pip through ``pip --python``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HOOK_FILES = ("traincheck_agent.pth", "traincheck_agent.start", "traincheck_agent_startup.py")
PROBE = "import json, sys; print(json.dumps(sorted(m for m in sys.modules if 'traincheck' in m)))"
BOGUS_LINE = (
    "[traincheck] warning: TRAINCHECK_MODE=bogus is not one of off, collect, check; "
    "the agent stays off"
)
NOT_STARTED = "[traincheck] warning: agent not started: "


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRAINCHECK_", "PIP_")) and k not in ("PYTHONPATH", "PYTHONHOME")
    }
    env.update(extra)
    return env


def run(argv: list[str], cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, env=clean_env(**env), cwd=cwd, timeout=300
    )


def checked(argv: list[str], cwd: Path | None = None) -> str:
    proc = run(argv, cwd=cwd)
    assert proc.returncode == 0, f"{argv}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


class Venv:
    """A bare venv: no pip, no torch, no wrapt."""

    def __init__(self, path: Path) -> None:
        checked([sys.executable, "-m", "venv", "--without-pip", str(path)])
        self.python = path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        self.site = Path(checked([str(self.python), "-c", code]).strip())

    def pip(self, *args: str) -> str:
        return checked([sys.executable, "-m", "pip", "--python", str(self.python), *args])

    def hook_files(self) -> list[str]:
        return sorted(name for name in HOOK_FILES if (self.site / name).exists())

    def start(self, mode: str | None = None) -> subprocess.CompletedProcess[str]:
        """``python -c`` in a neutral directory, so the repo checkout is not on sys.path."""
        env = {} if mode is None else {"TRAINCHECK_MODE": mode}
        return run([str(self.python), "-c", PROBE], cwd=self.python.parent, **env)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    checked(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out)]
        + ["--quiet", str(REPO)]
    )
    (built,) = out.glob("traincheck_agent-*.whl")
    return built


@pytest.fixture(scope="session")
def editable_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The PEP 660 wheel that ``pip install --no-build-isolation -e .`` builds and installs."""
    out = tmp_path_factory.mktemp("editable")
    code = (
        "import sys; from hatchling.build import build_editable; print(build_editable(sys.argv[1]))"
    )
    name = checked([sys.executable, "-c", code, str(out)], cwd=REPO).strip().splitlines()[-1]
    return out / name


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    venv = Venv(tmp_path_factory.mktemp("installed") / "venv")
    venv.pip("install", "--no-deps", "--quiet", str(wheel))
    return venv


def assert_inert(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert json.loads(proc.stdout) == []


def assert_one_line(proc: subprocess.CompletedProcess[str], prefix: str) -> None:
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(prefix), proc.stderr


@pytest.mark.slow
def test_wheel_holds_hook_at_top_level(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(HOOK_FILES) <= names
    assert "traincheck_agent/agent/process/role.py" in names
    assert "traincheck_agent/packs/builtin.json" in names  # TRAINCHECK_INV=builtin needs it
    assert not any(name.startswith("sitecustomize_pkg/") for name in names)


@pytest.mark.slow
def test_install_places_hook_files(installed: Venv) -> None:
    assert installed.hook_files() == sorted(HOOK_FILES)
    for name in HOOK_FILES:
        assert (installed.site / name).read_bytes() == (
            REPO / "sitecustomize_pkg" / name
        ).read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("mode", [None, "", "off"])
def test_installed_mode_off_is_inert(installed: Venv, mode: str | None) -> None:
    assert_inert(installed.start(mode))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["collect", "check"])
def test_installed_without_dependencies_warns_once(installed: Venv, mode: str) -> None:
    """No torch or wrapt in this venv: one warning line, and Python still runs."""
    assert_one_line(installed.start(mode), NOT_STARTED)


@pytest.mark.slow
def test_installed_unknown_mode_warns_once(installed: Venv) -> None:
    proc = installed.start("bogus")
    assert proc.returncode == 0
    assert proc.stderr.splitlines() == [BOGUS_LINE]


@pytest.mark.slow
def test_uninstall_removes_hook(wheel: Path, tmp_path: Path) -> None:
    venv = Venv(tmp_path / "venv")
    venv.pip("install", "--no-deps", "--quiet", str(wheel))
    assert venv.hook_files() == sorted(HOOK_FILES)
    venv.pip("uninstall", "--yes", "--quiet", "traincheck-agent")
    assert venv.hook_files() == []
    assert not (venv.site / "traincheck_agent").exists()
    assert_inert(venv.start("collect"))  # nothing left to start


@pytest.mark.slow
def test_half_uninstalled_gate_missing(wheel: Path, tmp_path: Path) -> None:
    venv = Venv(tmp_path / "venv")
    venv.pip("install", "--no-deps", "--quiet", str(wheel))
    (venv.site / "traincheck_agent_startup.py").unlink()
    for cached in (venv.site / "__pycache__").glob("traincheck_agent_startup.*"):
        cached.unlink()
    assert_inert(venv.start())
    assert_inert(venv.start("off"))
    assert_one_line(venv.start("collect"), NOT_STARTED + "ModuleNotFoundError: ")
    assert_one_line(venv.start("bogus"), NOT_STARTED + "ModuleNotFoundError: ")


@pytest.mark.slow
def test_editable_install_places_and_removes_hook(editable_wheel: Path, tmp_path: Path) -> None:
    venv = Venv(tmp_path / "venv")
    venv.pip("install", "--no-deps", "--quiet", str(editable_wheel))
    assert venv.hook_files() == sorted(HOOK_FILES)
    where = "import traincheck_agent; print(traincheck_agent.__file__)"
    location = checked([str(venv.python), "-c", where], cwd=venv.python.parent).strip()
    assert Path(location).resolve() == (REPO / "traincheck_agent" / "__init__.py").resolve()
    assert_inert(venv.start())
    assert_one_line(venv.start("collect"), NOT_STARTED)
    venv.pip("uninstall", "--yes", "--quiet", "traincheck-agent")
    assert venv.hook_files() == []
    assert_inert(venv.start("collect"))


def test_this_environment_has_hook_when_installed() -> None:
    """Where the suite runs from an install of the package (.ci/run: pip install -e), the hook
    is in this interpreter's site-packages."""
    try:
        dist = metadata.distribution("traincheck-agent")
    except metadata.PackageNotFoundError:
        pytest.skip("traincheck-agent is not installed in this environment")
    site = Path(str(dist.locate_file("")))
    assert all((site / name).is_file() for name in HOOK_FILES)
