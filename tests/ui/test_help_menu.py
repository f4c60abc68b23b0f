"""Issue 35, item 19: the Help menu held only About; nothing in the app said how to get an
LLM. Help → ContextSpan help (F1) reads the README and docs/ in the app, following the
links between them; Help → Get an LLM opens the page that says how to install Ollama and a
model and where to choose it."""

from __future__ import annotations

from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QApplication

from app.paths import DOCS_DIR
from app.ui.help_window import HelpWindow


def settle() -> None:
    for _ in range(5):
        QApplication.processEvents()


def test_the_help_menu_opens_the_docs_and_how_to_get_an_llm(qtbot, bare_window):
    features = bare_window.features
    help_menu = features.menus[2]
    said = [a.text().replace("&", "") for a in help_menu.actions() if not a.isSeparator()]
    assert said == ["ContextSpan help", "Get an LLM (Ollama)…", "About ContextSpan"], said
    assert features.help_action.shortcut().toString() == "F1"

    features.help_action.trigger()
    settle()
    (viewer,) = [w for w in QApplication.topLevelWidgets()
                 if isinstance(w, HelpWindow) and w.isVisible()]
    qtbot.waitExposed(viewer)
    assert viewer.shown_page().name == "README.md"
    titles = [viewer.pages.item(row).text() for row in range(viewer.pages.count())]
    assert titles[:2] == ["ContextSpan", "Getting an LLM: Ollama and a model"], titles
    assert "Models" in titles and "Your own tools: MCP servers" in titles
    assert len(titles) == 1 + len(list(DOCS_DIR.glob("*.md")))

    features.llm_help_action.trigger()  # the same window, on the LLM page
    settle()
    assert [w for w in QApplication.topLevelWidgets()
            if isinstance(w, HelpWindow) and w.isVisible()] == [viewer]
    text = viewer.browser.toPlainText()
    assert viewer.shown_page().name == "getting-an-llm.md"
    for step in ("https://ollama.com/download", "ollama pull qwen3:4b",
                 "Settings → Assistant (LLM)", "Test connection"):
        assert step in text, step
    assert viewer.pages.currentItem().text() == "Getting an LLM: Ollama and a model"

    # A link to another page is followed in the viewer, and the list shows where it is.
    link = viewer.browser.source().resolved(QUrl("llm.md"))  # as clicking "The LLM side"
    viewer.browser.setSource(link)
    settle()
    assert viewer.shown_page() == DOCS_DIR / "llm.md"
    assert viewer.pages.currentItem().text() == "The LLM side"
    assert "Orchestrator" in viewer.browser.toPlainText()
    viewer.close()
