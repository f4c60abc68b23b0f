"""The thin client's install (`bash installer/bootstrap.sh client`, the installers'
`--client`): the project without the `engine` extra, so no torch, moshi or bitsandbytes;
the app's and the dev installs take the extra. Checked from the commands the scripts run
(pip itself is not run here) and from pyproject.toml; tests/remote/test_thin_client.py runs
the client's code with the engine's packages blocked."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.installer.test_scripts import (
    INSTALL_SH,
    INSTALLER,
    MAC_INSTALL_SH,
    ROOT,
    _bootstrap_installs,
    faked_uname_env,
    home_env,
    pip_lines,
    run,
)
from tests.test_declared_dependencies import _normalise

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: pip carries the same parser
    from pip._vendor import tomli as tomllib

ENGINE_PACKAGES = {"torch", "moshi", "bitsandbytes"}


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _names(requirements: list[str]) -> set[str]:
    return {_normalise(re.split(r"[\[<>=!~;\s]", r, maxsplit=1)[0]) for r in requirements}


def test_the_client_install_has_no_engine_and_the_app_install_has_it():
    project = _project()
    extras = project["optional-dependencies"]
    assert not _names(project["dependencies"]) & ENGINE_PACKAGES
    assert _names(extras["engine"]) >= ENGINE_PACKAGES
    # What only a model loaded here needs stays out of the client too.
    assert not _names(project["dependencies"]) & {"silero-vad", "sentencepiece", "safetensors"}
    # The wire (Opus) and the LLM side are the client's.
    assert {"sphn", "aiohttp", "ollama", "pyside6-essentials"} <= _names(project["dependencies"])
    # dev (the tests) and cluster (`serve --cluster`'s replicas) run the engine.
    for extra in ("dev", "cluster"):
        assert "contextspan[engine]" in extras[extra], extra


def test_bootstrap_client_installs_the_project_without_the_engine_extra(tmp_path: Path):
    for system, machine in (("Linux", "x86_64"), ("Darwin", "arm64")):
        pips = _bootstrap_installs(tmp_path, system, machine, "client")
        assert pips[1:] == [f"-m pip install --quiet -e {ROOT}"], (system, pips)  # no mlx


def test_bootstrap_refuses_an_unknown_mode(tmp_path: Path):
    result = run(["bash", str(INSTALLER / "bootstrap.sh"), "thin"],
                 env=home_env(tmp_path) | {"CONTEXTSPAN_VENV": str(tmp_path / "venv")})
    assert result.returncode == 2 and "app|dev|client" in result.stderr
    assert not (tmp_path / "venv").exists()


def test_a_venv_set_up_for_the_app_is_not_set_up_again_for_the_client(tmp_path: Path):
    """The app's install holds the client's; the client's lacks the engine, so asking for
    the app after it installs again (adding the extra)."""
    import os

    venv, calls = tmp_path / "venv", tmp_path / "calls.log"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    python.chmod(0o755)
    env = dict(os.environ, CONTEXTSPAN_VENV=str(venv), PYTHON=sys.executable)

    def installs() -> list[str]:
        return [line for line in calls.read_text().splitlines() if "install --quiet -e" in line]

    for mode in ("app", "client", "app"):
        assert run(["bash", str(INSTALLER / "bootstrap.sh"), mode], env=env).returncode == 0
    assert installs() == [f"-m pip install --quiet -e {ROOT}[engine]"]
    calls.write_text("")
    (venv / ".contextspan-setup").unlink()
    for mode in ("client", "app"):
        assert run(["bash", str(INSTALLER / "bootstrap.sh"), mode], env=env).returncode == 0
    assert installs() == [f"-m pip install --quiet -e {ROOT}",
                          f"-m pip install --quiet -e {ROOT}[engine]"]


def test_linux_install_client_dry_run_installs_no_torch(tmp_path: Path):
    prefix = tmp_path / "prefix"
    result = run(["bash", str(INSTALL_SH), "--dry-run", "--client", "--prefix", str(prefix),
                  "--bin-dir", str(tmp_path / "bin"), "--python", sys.executable],
                 env=home_env(tmp_path))
    assert result.returncode == 0, result.stderr
    venv_python = f"{prefix}/venv/bin/python"
    assert pip_lines(result.stdout) == [f"+ {venv_python} -m pip install --quiet --upgrade pip",
                                        f"+ {venv_python} -m pip install --quiet -e {prefix}/app"]
    assert "torch" not in " ".join(pip_lines(result.stdout))
    assert "thin client" in result.stdout and "Speech recognition on the server" in result.stdout
    assert not prefix.exists()


def test_linux_install_refuses_client_with_a_torch_choice(tmp_path: Path):
    result = run(["bash", str(INSTALL_SH), "--dry-run", "--client", "--torch", "cpu"],
                 env=home_env(tmp_path))
    assert result.returncode == 2 and "--client installs no torch" in result.stderr


def test_mac_install_client_dry_run_installs_neither_torch_nor_mlx(tmp_path: Path):
    prefix = tmp_path / "prefix"
    result = run(["bash", str(MAC_INSTALL_SH), "--dry-run", "--client", "--prefix", str(prefix),
                  "--python", sys.executable], env=faked_uname_env(tmp_path, "Darwin", "arm64"))
    assert result.returncode == 0, result.stderr
    pips = pip_lines(result.stdout)
    assert pips[-1] == f"+ {prefix}/venv/bin/python -m pip install --quiet -e {prefix}/app"
    assert "moshi_mlx" not in result.stdout and "thin client" in result.stdout


def test_windows_install_names_the_client_switch_and_the_engine_extra():
    """PowerShell is not here: the script's text is all that can be checked."""
    script = (INSTALLER / "windows" / "install.ps1").read_text()
    assert "[switch]$Client" in script
    assert '"$Src[engine]"' in script and "if ($Client) { $Src }" in script
    # The ValidateSet'd $Torch never holds "client" (PowerShell would throw on it).
    assert '$Torch = "client"' not in script


def _closure(requirements: list[str]) -> dict[str, str]:
    """Every distribution the requirements pull in, as this venv's metadata says (what an
    install of them resolves to, extras and other platforms' markers left out): name ->
    the requirement that first brought it."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip carries the same parser
        from pip._vendor.packaging.requirements import Requirement

    found: dict[str, str] = {}
    pending = [(Requirement(r), "pyproject.toml") for r in requirements]
    while pending:
        requirement, by = pending.pop()
        name = _normalise(requirement.name)
        if name in found or (requirement.marker is not None
                             and not requirement.marker.evaluate({"extra": ""})):
            continue
        found[name] = by
        try:
            requires = distribution(requirement.name).requires or []
        except PackageNotFoundError:
            continue  # not installed here: nothing known of what it pulls in
        pending += [(Requirement(r), name) for r in requires]
    return found


def test_the_client_install_brings_no_scipy_and_no_matplotlib():
    """The thin client's install was 862 MB, over its 700 MB goal: noisereduce declares
    matplotlib (its plots) and it and pyloudnorm scipy (an STFT, two biquads), some 250 MB
    together. The leveller's gate and meter are theirs on numpy now (app/audio)."""
    pulled = _closure(_project()["dependencies"])
    heavy = {name: by for name, by in pulled.items() if name in {"scipy", "matplotlib"}}
    assert not heavy, f"pulled in by: {heavy}"
    assert {"numpy", "aiohttp", "sphn"} <= set(pulled)  # the closure is read at all
