"""Fast checks of the installer scripts. The packaged build and its smoke test are too slow
for the suite: they are one command, installer/linux/build.sh --smoke-test."""

from __future__ import annotations

import ast
import configparser
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALLER = ROOT / "installer"
INSTALL_SH = INSTALLER / "linux" / "install.sh"
SHELL_SCRIPTS = sorted(INSTALLER.rglob("*.sh"))


def run(cmd: list[str], env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, **kwargs)


def home_env(home: Path) -> dict[str, str]:
    """An environment whose home and XDG folders are all under `home`."""
    env = dict(os.environ, HOME=str(home), XDG_DATA_HOME=str(home / "share"),
               XDG_CONFIG_HOME=str(home / "config"), XDG_CACHE_HOME=str(home / "cache"))
    env["PATH"] = f"{home / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shell_script_parses(script: Path):
    result = run(["bash", "-n", str(script)])
    assert result.returncode == 0, result.stderr


def test_shell_scripts_pass_shellcheck():
    # Not a skip when it is missing (the test command installs it): as a skip it hid five
    # findings on CI, which had no shellcheck.
    assert shutil.which("shellcheck"), "no shellcheck: bash installer/system_packages.sh tests"
    result = run(["shellcheck", *map(str, SHELL_SCRIPTS)])
    assert result.returncode == 0, result.stdout


def test_install_dry_run_prints_the_steps_and_changes_nothing(tmp_path: Path):
    prefix = tmp_path / "prefix"
    result = run(["bash", str(INSTALL_SH), "--dry-run", "--prefix", str(prefix),
                  "--bin-dir", str(tmp_path / "bin"), "--python", sys.executable],
                 env=home_env(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"+ {sys.executable} -m venv {prefix}/venv" in out
    assert f"+ {prefix}/venv/bin/python -m pip install --quiet -e {prefix}/app[engine]\n" in out
    assert "download.pytorch.org" not in out  # PyPI's torch unless --torch cpu
    assert f"+ write {tmp_path}/bin/contextspan" in out
    assert f"+ write {tmp_path}/share/applications/contextspan.desktop" in out
    assert "hicolor/256x256/apps/contextspan.png" in out
    assert not prefix.exists() and not (tmp_path / "share").exists()

    cpu = run(["bash", str(INSTALL_SH), "--dry-run", "--torch", "cpu", "--prefix", str(prefix),
               "--python", sys.executable], env=home_env(tmp_path))
    assert "--index-url https://download.pytorch.org/whl/cpu" in cpu.stdout


def test_install_rejects_an_unknown_torch_choice(tmp_path: Path):
    result = run(["bash", str(INSTALL_SH), "--dry-run", "--torch", "rocm"],
                 env=home_env(tmp_path))
    assert result.returncode == 2 and "--torch" in result.stderr


def _fake_installed_venv(prefix: Path) -> None:
    """A venv whose dependencies are recorded as installed, so install.sh skips pip."""
    python = prefix / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    (prefix / ".install-stamp").write_text(f"{digest}-pypi\n")


def test_install_is_idempotent_and_uninstall_removes_what_it_added(tmp_path: Path):
    prefix, bin_dir, share = tmp_path / "prefix", tmp_path / "bin", tmp_path / "share"
    _fake_installed_venv(prefix)
    (share / "applications").mkdir(parents=True)
    (share / "applications" / "other.desktop").write_text("[Desktop Entry]\n")
    cmd = ["bash", str(INSTALL_SH), "--prefix", str(prefix), "--bin-dir", str(bin_dir),
           "--python", sys.executable]
    for _ in range(2):  # the second run updates in place
        result = run(cmd, env=home_env(tmp_path))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Dependencies are up to date" in result.stdout

    launcher = bin_dir / "contextspan"
    assert os.access(launcher, os.X_OK)
    assert f'exec "{prefix}/venv/bin/python" "{prefix}/app/main.py" "$@"' in launcher.read_text()
    assert (prefix / "app" / "app" / "cli" / "main.py").is_file()
    assert (prefix / "app" / "models" / "tiny.json").is_file()
    assert not (prefix / "app.new").exists()
    desktop = share / "applications" / "contextspan.desktop"
    entry = _parse_desktop(desktop)
    assert entry["Exec"] == str(launcher) and entry["Icon"] == "contextspan"
    assert (share / "icons/hicolor/256x256/apps/contextspan.png").is_file()
    assert (share / "icons/hicolor/scalable/apps/contextspan.svg").is_file()

    result = run([*cmd, "--uninstall"], env=home_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert not launcher.exists() and not desktop.exists() and not prefix.exists()
    assert not (share / "icons/hicolor/256x256/apps/contextspan.png").exists()
    assert (share / "applications" / "other.desktop").exists()


def _parse_desktop(path: Path) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # keys are case-sensitive
    parser.read(path, encoding="utf-8")
    assert parser.sections() == ["Desktop Entry"]
    entry = dict(parser["Desktop Entry"])
    for key in ("Type", "Name", "Exec", "Icon", "Categories"):
        assert entry.get(key), f"{key} missing"
    assert entry["Type"] == "Application" and entry["Categories"].endswith(";")
    return entry


def test_desktop_entry_template_validates(tmp_path: Path):
    desktop = tmp_path / "contextspan.desktop"
    template = (INSTALLER / "linux" / "contextspan.desktop").read_text()
    desktop.write_text(template.replace("@EXEC@", "/home/user/.local/bin/contextspan"))
    _parse_desktop(desktop)
    if shutil.which("desktop-file-validate"):
        result = run(["desktop-file-validate", str(desktop)])
        assert result.returncode == 0 and not result.stdout.strip(), result.stdout


def test_pyinstaller_spec_parses_and_names_what_it_bundles():
    spec = (INSTALLER / "pyinstaller" / "contextspan.spec").read_text()
    ast.parse(spec)
    for needed in ('"models"', '"silero_vad"', '"trafilatura"', '"justext"', '"livekit"',
                   "entry.py", "NSMicrophoneUsageDescription"):
        assert needed in spec
    assert (INSTALLER / "pyinstaller" / "entry.py").is_file()
    for icon in ("contextspan.png", "contextspan.ico", "contextspan.icns", "contextspan.svg"):
        assert (ROOT / "assets" / icon).stat().st_size > 0


def test_frozen_entry_runs_the_apps_own_modules_as_dash_m(tmp_path: Path):
    """In a frozen app sys.executable is the app; `-m module` must reach that module."""
    entry = INSTALLER / "pyinstaller" / "entry.py"
    out = tmp_path / "spm.model"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = run([sys.executable, str(entry), "-m", "app.checkpoints.tokenizer_trainer",
                  "--out", str(out), "--vocab-size", "300", "--seed", "3"],
                 env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert out.stat().st_size > 1000

    refused = run([sys.executable, str(entry), "-m", "http.server"], env=env, cwd=tmp_path)
    assert refused.returncode == 2 and "only runs its own modules" in refused.stderr

    models = run([sys.executable, str(entry), "models"], env=env, cwd=tmp_path)
    assert models.returncode == 0 and "tiny" in models.stdout


def test_mac_build_dry_run_prints_the_app_and_dmg_steps():
    result = run(["bash", str(INSTALLER / "macos" / "build_app.sh"), "--dry-run",
                  "--python", sys.executable])
    assert result.returncode == 0, result.stderr
    assert "contextspan.spec" in result.stdout
    assert "+ hdiutil create -volname ContextSpan" in result.stdout


def test_inno_setup_script_packages_the_one_folder_build():
    iss = (INSTALLER / "windows" / "contextspan.iss").read_text()
    assert r'Source: "{#Root}\dist\{#AppName}\*"' in iss
    assert "PrivilegesRequired=lowest" in iss
    assert r"SetupIconFile={#Root}\assets\contextspan.ico" in iss


def test_the_app_launcher_after_the_test_command_installs_nothing_again(tmp_path: Path):
    """run-tests.sh sets the venv up with the dev extra, run-app.sh with the app alone: the
    dev install holds the app's, so switching between them must not reinstall each time.
    The venv's python here only records what it is asked (pip is not run)."""
    venv, calls = tmp_path / "venv", tmp_path / "calls.log"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    python.chmod(0o755)
    env = dict(os.environ, CONTEXTSPAN_VENV=str(venv), PYTHON=sys.executable)
    for mode in ("dev", "app", "dev", "app"):
        result = run(["bash", str(INSTALLER / "bootstrap.sh"), mode], env=env)
        assert result.returncode == 0, result.stderr
    installs = [line for line in calls.read_text().splitlines() if "install --quiet -e" in line]
    assert len(installs) == 1 and installs[0].endswith("[dev]"), installs
    (venv / ".contextspan-setup").write_text("another-pyproject-dev\n")  # pyproject changed
    assert run(["bash", str(INSTALLER / "bootstrap.sh"), "app"], env=env).returncode == 0
    installs = [line for line in calls.read_text().splitlines() if "install --quiet -e" in line]
    assert len(installs) == 2 and not installs[1].endswith("[dev]")


# ---- the macOS install and the package choice (installer/python_packages.sh) ---------------

MAC_INSTALL_SH = INSTALLER / "macos" / "install.sh"


def faked_uname_env(home: Path, system: str, machine: str) -> dict[str, str]:
    """`home_env` with a `uname` first on PATH that answers `system` (-s) and `machine` (-m):
    the scripts choose their packages by uname alone."""
    bin_dir = home / "fake-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    uname = bin_dir / "uname"
    uname.write_text(f'#!/bin/sh\ncase "$1" in -m) echo {machine} ;; *) echo {system} ;; esac\n')
    uname.chmod(0o755)
    env = home_env(home)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def pip_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if " -m pip " in line]


def test_mac_install_on_apple_silicon_installs_the_mlx_path_and_no_cuda_wheel(tmp_path: Path):
    prefix = tmp_path / "prefix"
    result = run(["bash", str(MAC_INSTALL_SH), "--dry-run", "--prefix", str(prefix),
                  "--bin-dir", str(tmp_path / "bin"), "--apps-dir", str(tmp_path / "Apps"),
                  "--python", sys.executable], env=faked_uname_env(tmp_path, "Darwin", "arm64"))
    assert result.returncode == 0, result.stderr
    pips = pip_lines(result.stdout)
    venv_python = f"{prefix}/venv/bin/python"
    assert pips == [f"+ {venv_python} -m pip install --quiet --upgrade pip",
                    f"+ {venv_python} -m pip install --quiet -e {prefix}/app[engine,mlx]",
                    f"+ {venv_python} -m pip install --quiet --no-deps moshi_mlx==0.3.0"]
    # torch is PyPI's macOS wheel (CPU+MPS): no other index, no CUDA package named.
    assert not any(word in result.stdout.lower()
                   for word in ("--index-url", "download.pytorch.org", "cuda", "nvidia"))
    assert f"+ write {tmp_path}/Apps/ContextSpan.app/Contents/Info.plist" in result.stdout
    assert f"+ write {tmp_path}/bin/contextspan" in result.stdout
    assert not prefix.exists() and not (tmp_path / "Apps").exists()


def test_mac_install_on_an_intel_mac_installs_no_mlx(tmp_path: Path):
    result = run(["bash", str(MAC_INSTALL_SH), "--dry-run", "--prefix", str(tmp_path / "p"),
                  "--python", sys.executable], env=faked_uname_env(tmp_path, "Darwin", "x86_64"))
    assert result.returncode == 0, result.stderr
    pips = pip_lines(result.stdout)
    assert pips[-1].endswith(f"-e {tmp_path}/p/app[engine]") and len(pips) == 2
    assert "moshi_mlx" not in result.stdout and "Intel Mac" in result.stdout


def test_mac_install_refuses_to_install_on_linux(tmp_path: Path):
    result = run(["bash", str(MAC_INSTALL_SH), "--prefix", str(tmp_path / "p")],
                 env=faked_uname_env(tmp_path, "Linux", "x86_64"))
    assert result.returncode == 1 and "linux/install.sh" in result.stderr
    assert not (tmp_path / "p").exists()


def _bootstrap_installs(tmp_path: Path, system: str, machine: str, mode: str) -> list[str]:
    """The pip commands bootstrap.sh runs for MODE on a machine with this uname; the venv's
    python only records what it is asked (pip is not run)."""
    venv, calls = tmp_path / f"venv-{system}-{machine}-{mode}", tmp_path / "calls.log"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    python.chmod(0o755)
    calls.write_text("")
    env = dict(faked_uname_env(tmp_path, system, machine), CONTEXTSPAN_VENV=str(venv),
               PYTHON=sys.executable)
    result = run(["bash", str(INSTALLER / "bootstrap.sh"), mode], env=env)
    assert result.returncode == 0, result.stderr
    return [line for line in calls.read_text().splitlines() if line.startswith("-m pip install")]


def test_the_setup_installs_moshi_mlx_without_its_pins_where_mlx_runs(tmp_path: Path):
    # run-app.sh on a Mac with Apple silicon: the mlx extra and moshi_mlx.
    assert _bootstrap_installs(tmp_path, "Darwin", "arm64", "app")[1:] == [
        f"-m pip install --quiet -e {ROOT}[engine,mlx]",
        "-m pip install --quiet --no-deps moshi_mlx==0.3.0"]
    # run-tests.sh on Linux (CI): the dev extra, which holds mlx[cpu], and moshi_mlx.
    assert _bootstrap_installs(tmp_path, "Linux", "x86_64", "dev")[1:] == [
        f"-m pip install --quiet -e {ROOT}[dev]",
        "-m pip install --quiet --no-deps moshi_mlx==0.3.0"]
    # run-app.sh on Linux: the app and its engine.
    assert _bootstrap_installs(tmp_path, "Linux", "x86_64", "app")[1:] == [
        f"-m pip install --quiet -e {ROOT}[engine]"]


def test_the_dev_extra_brings_mlx_cpu_on_linux():
    pyproject = (ROOT / "pyproject.toml").read_text()
    dev = re.search(r"^dev = \[(.*?)\]$", pyproject, re.M | re.S)
    mlx = re.search(r"^mlx = \[(.*?)\]$", pyproject, re.M | re.S)
    assert dev and mlx and '"contextspan[mlx]"' in dev.group(1)
    assert re.search(r"\"mlx\[cpu\][^\"]*; sys_platform == 'linux'\"", mlx.group(1))
