"""Help → ContextSpan help: the README and the docs/ pages, read in the app.

A local viewer rather than the browser: a Markdown file opened in a browser shows its raw
text, and the docs are on this computer (the checkout's, or the copy the installers put
beside the app). Qt's text browser reads Markdown (CommonMark with GitHub's tables), follows
the links between the pages itself and hands web links to the browser.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSize, Qt, QUrl
from PySide6.QtGui import QDesktopServices, QTextDocument
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.paths import DOCS_DIR, README_PATH
from app.ui.screen_fit import fit_when_shown

GETTING_AN_LLM = DOCS_DIR / "getting-an-llm.md"
WANTED_SIZE = QSize(900, 640)
_PATH_ROLE = Qt.ItemDataRole.UserRole


def page_title(path: Path) -> str:
    """A page's first heading ("# Models" -> "Models"), else its file name."""
    try:
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("# "):
                    return line[2:].strip()
    except OSError:
        pass
    return path.stem


def help_pages(docs: Path = DOCS_DIR, readme: Path = README_PATH) -> list[Path]:
    """The README first, then how to get an LLM, then the other pages by title."""
    pages = [readme] if readme.is_file() else []
    if (docs / GETTING_AN_LLM.name).is_file():
        pages.append(docs / GETTING_AN_LLM.name)
    others = [p for p in docs.glob("*.md") if p.name != GETTING_AN_LLM.name] \
        if docs.is_dir() else []
    return pages + sorted(others, key=lambda p: page_title(p).casefold())


class HelpWindow(QDialog):
    """The pages in a list at the left, the chosen one at the right."""

    def __init__(self, parent: QWidget | None = None, page: Path | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("ContextSpan help")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)  # closed, it dies
        self.setModal(False)
        self.pages = QListWidget(self)
        self.pages.setAccessibleName("Help pages")
        self.browser = QTextBrowser(self)
        self.browser.setAccessibleName("Help page")
        self.browser.setOpenExternalLinks(True)  # web links: the browser
        self.browser.setOpenLinks(True)  # links between the pages: here
        self.folder_button = QPushButton("Open the docs folder", self)
        self.folder_button.setToolTip(str(DOCS_DIR))
        self.folder_button.clicked.connect(self._open_folder)
        close = QPushButton("Close", self)
        close.clicked.connect(self.close)
        split = QSplitter(self)
        split.addWidget(self.pages)
        split.addWidget(self.browser)
        split.setStretchFactor(1, 1)
        split.setSizes([200, 600])
        buttons = QHBoxLayout()
        buttons.addWidget(self.folder_button)
        buttons.addStretch(1)
        buttons.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(split, 1)
        layout.addLayout(buttons)
        for path in help_pages():
            item = QListWidgetItem(page_title(path), self.pages)
            item.setData(_PATH_ROLE, str(path))
            item.setToolTip(str(path))
        self.pages.currentItemChanged.connect(self._chosen)
        self.browser.sourceChanged.connect(self._followed)
        if self.pages.count() == 0:
            self.browser.setPlainText(
                f"The help pages are not on this computer (looked in {DOCS_DIR}). They are "
                "the docs folder of ContextSpan's source: the README and docs/*.md.")
            self.folder_button.setEnabled(False)
        else:
            self.show_page(page or Path(self.pages.item(0).data(_PATH_ROLE)))
        fit_when_shown(self, WANTED_SIZE)  # where the screen has room for it

    def show_page(self, path: Path) -> None:
        """Show `path` (one of the pages, or any Markdown file)."""
        self.browser.setSource(QUrl.fromLocalFile(str(path)),
                               QTextDocument.ResourceType.MarkdownResource)

    def shown_page(self) -> Path | None:
        source = self.browser.source()
        return Path(source.toLocalFile()) if source.isLocalFile() else None

    def _chosen(self, item: QListWidgetItem | None, _previous: object) -> None:
        if item is not None and Path(item.data(_PATH_ROLE)) != self.shown_page():
            self.show_page(Path(item.data(_PATH_ROLE)))

    def _followed(self, url: QUrl) -> None:
        """A link between the pages: the list shows which page it is."""
        shown = Path(url.toLocalFile()).resolve() if url.isLocalFile() else None
        for row in range(self.pages.count()):
            item = self.pages.item(row)
            if shown is not None and Path(item.data(_PATH_ROLE)).resolve() == shown:
                self.pages.blockSignals(True)
                self.pages.setCurrentItem(item)
                self.pages.blockSignals(False)
                return

    def _open_folder(self) -> None:
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(DOCS_DIR)))

