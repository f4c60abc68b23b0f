"""Why Qt could not open a window, in words a user can act on.

When Qt's platform plugin (xcb on a Linux desktop) cannot load, Qt itself says only "no Qt
platform plugin could be initialized. Reinstalling the application may fix this problem" and
aborts; the line that matters is the loader's, and it names no library either ("xcb-cursor0
is needed", whichever one is missing). Here the plugin's own file is asked which shared
libraries it cannot find (`ldd`, or the loader's error where there is no ldd), and the answer
names them with the one command that installs them.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path

LDD_TIMEOUT_S = 10.0
# Debian's package names where its rule (the library's name and its soname version, a hyphen
# between two digits) does not give them.
_DEBIAN_PACKAGES = {"libglib-2.0.so.0": "libglib2.0-0"}
_SONAME = re.compile(r"(lib[\w+.-]+?)\.so\.(\d+)(?:\.[\d.]+)?")
PYSIDE_REINSTALL = "pip install --force-reinstall PySide6-Essentials"
_NOT_LOADED = re.compile(r'Could not load the Qt platform plugin "([^"]+)"(?: in "([^"]*)")?')
_NO_DISPLAY = re.compile(r"could not connect to display\s*(\S*)")


def plugin_file(platform: str, folder: str = "") -> Path | None:
    """The platform plugin Qt loads for `platform` ("xcb": libqxcb.so), if it is there:
    in `folder` (where Qt said it looked), the folders QT_QPA_PLATFORM_PLUGIN_PATH and
    QT_PLUGIN_PATH name, then PySide6's own."""
    from PySide6.QtCore import QLibraryInfo

    folders = [Path(folder)] if folder else []
    folders += [Path(p) for p in os.environ.get("QT_QPA_PLATFORM_PLUGIN_PATH", "").split(
        os.pathsep) if p]
    folders += [Path(p) / "platforms" for p in os.environ.get("QT_PLUGIN_PATH", "").split(
        os.pathsep) if p]
    folders.append(Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms")
    for place in folders:
        for name in (f"libq{platform}.so", f"libq{platform.split('-')[0]}.so"):
            if (place / name).is_file():
                return place / name
    return None


def missing_libraries(plugin: Path) -> list[str]:
    """The shared libraries `plugin` needs and the loader cannot find, in the order it
    looks for them (all of them with ldd; the first one from the loader's error without)."""
    ldd = shutil.which("ldd")
    if ldd is not None:
        try:
            listed = subprocess.run([ldd, str(plugin)], capture_output=True, text=True,
                                    timeout=LDD_TIMEOUT_S).stdout
        except (OSError, subprocess.SubprocessError):
            listed = ""
        missing = [line.split("=>")[0].strip() for line in listed.splitlines()
                   if "=> not found" in line]
        if missing or listed:
            return list(dict.fromkeys(missing))
    try:
        ctypes.CDLL(str(plugin))
    except OSError as exc:  # "libxcb-icccm.so.4: cannot open shared object file: ..."
        name = str(exc).split(":")[0].strip()
        return [name] if _SONAME.fullmatch(name) else []
    return []


def debian_package(soname: str) -> str:
    """The Debian/Ubuntu package that holds `soname` (libxcb-icccm.so.4: libxcb-icccm4)."""
    if soname in _DEBIAN_PACKAGES:
        return _DEBIAN_PACKAGES[soname]
    found = _SONAME.fullmatch(soname)
    if found is None:
        return soname
    name, version = found.group(1).lower(), found.group(2)
    return f"{name}-{version}" if name[-1].isdigit() else f"{name}{version}"


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def explain_platform_failure(qt_messages: list[str]) -> str:
    """What to tell the user when Qt could not initialise a platform plugin; `qt_messages`:
    what Qt said before it gave up (they name the plugin it tried, and a display it could
    not reach)."""
    said = "\n".join(qt_messages)
    tried = _NOT_LOADED.search(said)
    platform = tried.group(1) if tried else "xcb"
    plugin = plugin_file(platform, (tried.group(2) or "") if tried else "")
    missing = missing_libraries(plugin) if plugin is not None else []
    qt_own = [name for name in missing if name.startswith("libQt6")]
    system = [name for name in missing if name not in qt_own]
    lines = [f"error: the desktop app cannot open a window: Qt's {platform} platform plugin "
             "does not load."]
    if system:
        verb = "is" if len(system) == 1 else "are"
        lines.append(f"It needs {_listed(system)}, which {verb} not installed. On Debian or "
                     "Ubuntu this installs them:")
        lines.append(f"    sudo apt-get install {' '.join(debian_package(n) for n in system)}")
    if qt_own:
        what = "library" if len(qt_own) == 1 else "libraries"
        verb = "is" if len(qt_own) == 1 else "are"
        lines.append(f"Qt's own {what} {_listed(qt_own)} {verb} not found beside the plugin: "
                     f"reinstall PySide6 with `{PYSIDE_REINSTALL}`.")
    if not missing:
        display = _NO_DISPLAY.search(said)
        if display is not None:
            where = display.group(1) or "(none given)"
            lines.append(f"It could not connect to the display {where}: start the app from "
                         "a desktop session, or under a virtual display with "
                         "`xvfb-run python main.py`.")
        elif plugin is None:
            lines.append(f"No {platform} plugin was found in PySide6: reinstall it with "
                         f"`{PYSIDE_REINSTALL}`, or choose another platform (QT_QPA_PLATFORM).")
        else:
            lines.append("Qt's messages before it gave up are in the log; "
                         "QT_DEBUG_PLUGINS=1 also shows them here.")
    return "\n".join(lines)


def is_platform_failure(message: str) -> bool:
    """Whether Qt's fatal `message` is its "no platform plugin could be initialized"."""
    return "platform plugin could be initialized" in message
