"""local_search on a real folder of files: hits, FTS-safe queries and strict containment."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest

from app.tools.local_search import LocalFolderSearchTool, safe_subfolder

SECRET = "zebrapassword"  # a word that only exists outside the chosen folder


@pytest.fixture()
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """(root the user chose, a secret folder next to it)."""
    root = tmp_path / "docs"
    secret = tmp_path / "secret"
    (root / "notes" / "2026").mkdir(parents=True)
    (root / ".git").mkdir()
    secret.mkdir()
    (secret / "passwords.txt").write_text(f"bank login {SECRET} otter\n")
    (root / "otters.md").write_text(
        "# Otters\n\nThe Baltic otter population recovered after 1990. Otters eat fish, "
        "frogs and crayfish, and they need clean rivers.\n")
    (root / "notes" / "2026" / "trip.txt").write_text(
        "Trip plan: visit Gdansk in May, see the harbour otters, buy smoked fish.\n")
    (root / "notes" / "recipes.rst").write_text("Pancakes\n========\nflour, milk, eggs\n")
    (root / "page.html").write_text(
        "<html><head><style>.kayak{color:red}</style></head><body><p>Kayak rental by "
        "the lake</p><script>var kayakTracker = 1;</script></body></html>")
    (root / ".git" / "config.txt").write_text("hidden gitsecretword\n")
    (root / ".env.txt").write_text("API_TOKEN=dotfilesecretword\n")
    (root / "photo.txt").write_bytes(b"\x89PNG\r\n\x00\x00binaryword" + bytes(100))
    (root / "image.bin").write_text("binextensionword\n")
    return root, secret


def make_tool(root: Path, **kwargs: object) -> LocalFolderSearchTool:
    return LocalFolderSearchTool([root], **kwargs)  # in memory unless index_dir is given


def test_finds_files_with_relative_paths_and_snippets(folders: tuple[Path, Path]) -> None:
    root, _ = folders
    result = make_tool(root).run({"query": "otters fish"})
    assert result.ok, result.error
    assert "otters.md" in result.content
    assert "notes/2026/trip.txt" in result.content
    assert "crayfish" in result.content or "smoked fish" in result.content
    assert str(root) not in result.content  # paths are relative to the chosen folder
    assert "passwords" not in result.content


def test_html_is_indexed_as_visible_text(folders: tuple[Path, Path]) -> None:
    root, _ = folders
    tool = make_tool(root)
    result = tool.run({"query": "kayak rental"})
    assert "page.html" in result.content and "Kayak rental by the lake" in result.content
    assert "kayakTracker" not in result.content and "color:red" not in result.content


def test_no_match_is_an_answer_not_an_error(folders: tuple[Path, Path]) -> None:
    result = make_tool(folders[0]).run({"query": "submarine"})
    assert result.ok and "No local files match" in result.content


@pytest.mark.parametrize("query", [
    '"foo" OR bar*', "NEAR(", "NEAR(otter fish, 2)", 'otter"', "body:otter", "name:otter",
    "otter AND", "NOT otter", "-otter", "^otter", "otter*", "{name body}: fish", "'; DROP TABLE",
    "otter) OR (1=1",
])
def test_fts_syntax_in_the_query_never_crashes(folders: tuple[Path, Path], query: str) -> None:
    result = make_tool(folders[0]).run({"query": query})
    assert result.ok, result.error
    assert SECRET not in result.content


@pytest.mark.parametrize("query", ['"', "(((", '*** ((( "" ---', "()"])
def test_a_query_without_words_is_a_clean_error(folders: tuple[Path, Path], query: str) -> None:
    result = make_tool(folders[0]).run({"query": query})
    assert not result.ok and "no words" in result.error


def test_symlinked_file_pointing_outside_is_never_indexed(folders: tuple[Path, Path]) -> None:
    root, secret = folders
    (root / "innocent.txt").symlink_to(secret / "passwords.txt")
    (root / "notes" / "link-to-secret.md").symlink_to(secret / "passwords.txt")
    tool = make_tool(root)
    stats = tool.refresh()
    assert stats.skipped >= 2
    for query in (SECRET, "bank login", "innocent"):
        result = tool.run({"query": query})
        assert result.ok and "No local files match" in result.content
    assert "innocent" not in "".join(rel for (rel,) in tool._db.execute("SELECT rel FROM files"))


def test_symlinked_directory_pointing_outside_is_never_walked(
        folders: tuple[Path, Path]) -> None:
    root, secret = folders
    (root / "shortcut").symlink_to(secret, target_is_directory=True)
    tool = make_tool(root)
    result = tool.run({"query": f"{SECRET} bank"})
    assert result.ok and "No local files match" in result.content
    for folder in ("shortcut", "shortcut/"):
        refused = tool.run({"query": "bank", "folder": folder})
        assert not refused.ok and "outside" in refused.error


def test_root_given_through_a_symlink_is_resolved(folders: tuple[Path, Path],
                                                  tmp_path: Path) -> None:
    root, _ = folders
    alias = tmp_path / "alias"
    alias.symlink_to(root, target_is_directory=True)
    result = LocalFolderSearchTool([alias]).run({"query": "pancakes"})
    assert "notes/recipes.rst" in result.content


@pytest.mark.parametrize("folder", [
    "..", "../secret", "notes/../../secret", "/etc", str(Path("/tmp")), "C:\\Windows",
    "notes\\..\\..\\secret", "~/secret", "notes/\x00",
])
def test_dotdot_and_absolute_folder_arguments_are_refused(folders: tuple[Path, Path],
                                                          folder: str) -> None:
    result = make_tool(folders[0]).run({"query": "bank otter", "folder": folder})
    assert not result.ok and result.content == ""


def test_folder_argument_restricts_the_search(folders: tuple[Path, Path]) -> None:
    root, _ = folders
    tool = make_tool(root)
    result = tool.run({"query": "otters", "folder": "notes/2026"})
    assert result.ok and "notes/2026/trip.txt" in result.content
    assert "otters.md" not in result.content
    assert safe_subfolder("./notes//2026/") == PurePosixPath("notes/2026")


def test_binary_hidden_and_unlisted_files_are_skipped(folders: tuple[Path, Path]) -> None:
    tool = make_tool(folders[0])
    for word in ("binaryword", "gitsecretword", "binextensionword", "dotfilesecretword"):
        result = tool.run({"query": word})
        assert result.ok and "No local files match" in result.content


def test_huge_file_is_indexed_only_up_to_the_cap(folders: tuple[Path, Path]) -> None:
    root, _ = folders
    filler = "lorem ipsum dolor sit amet " * 40_000  # about 1 MB
    (root / "huge.txt").write_text(f"earlyneedle {filler} lateneedle")
    tool = make_tool(root, max_file_bytes=100_000)
    assert "huge.txt" in tool.run({"query": "earlyneedle"}).content
    assert "No local files match" in tool.run({"query": "lateneedle"}).content


def test_refresh_is_incremental_and_the_index_persists(folders: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    root, _ = folders
    index_dir = tmp_path / "cache"
    first = make_tool(root, index_dir=index_dir)
    stats = first.refresh()
    assert (stats.indexed, stats.unchanged, stats.skipped) == (4, 0, 1)  # photo.txt is binary
    first.close()

    (root / "notes" / "recipes.rst").write_text("Waffles\n=======\nbutter, sugar\n")
    os.utime(root / "notes" / "recipes.rst", ns=(1, 1))
    (root / "otters.md").unlink()
    (root / "new.md").write_text("A note about kayaks.\n")
    second = make_tool(root, index_dir=index_dir, stale_after_s=0)
    stats = second.refresh()
    assert (stats.indexed, stats.removed) == (2, 1)
    assert stats.unchanged == 2
    assert "recipes.rst" in second.run({"query": "waffles"}).content
    assert "No local files match" in second.run({"query": "pancakes"}).content
    assert "new.md" in second.run({"query": "kayaks"}).content
    assert "otters.md" not in second.run({"query": "crayfish"}).content
    second.close()
    assert index_dir.is_dir() and any(index_dir.iterdir())


def test_several_roots_are_labelled(folders: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = folders
    other = tmp_path / "work"
    other.mkdir()
    (other / "otter-report.md").write_text("Quarterly otter report.\n")
    result = LocalFolderSearchTool([root, other, root / "notes"]).run({"query": "otter"})
    assert "docs/otters.md" in result.content and "work/otter-report.md" in result.content


@pytest.mark.parametrize("arguments", [
    {}, {"query": ""}, {"query": 5}, {"query": "otter", "folder": 3},
    {"query": "otter", "max_results": "3"}, {"query": "otter", "max_results": False},
])
def test_bad_arguments_are_errors(folders: tuple[Path, Path], arguments: dict) -> None:
    assert not make_tool(folders[0]).run(arguments).ok


def test_no_existing_folder_is_an_error(tmp_path: Path) -> None:
    result = LocalFolderSearchTool([tmp_path / "missing"]).run({"query": "otter"})
    assert not result.ok and "no local folders" in result.error
