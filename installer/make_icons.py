"""Render assets/contextspan.svg to the PNG, ICO and ICNS icons the installers use.

Run with the project's Python (it uses Qt's SVG renderer and image writers):
    QT_QPA_PLATFORM=offscreen python installer/make_icons.py
The outputs are committed, so the installers never need to run this.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def render(svg: Path, size: int) -> QImage:
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    QSvgRenderer(str(svg)).render(painter)
    painter.end()
    return image


def main() -> int:
    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841
    svg = ASSETS / "contextspan.svg"
    outputs = {"contextspan.png": 256, "contextspan.ico": 256, "contextspan.icns": 512}
    for name, size in outputs.items():
        if not render(svg, size).save(str(ASSETS / name)):
            print(f"error: Qt could not write {name}", file=sys.stderr)
            return 1
        print(f"wrote {ASSETS / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
