"""QA sets from local folders: the two layouts, columns found as the reference finds them,
and corrupt items reported and skipped, never fatal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.eval.qa_sets import QaSetError, load_qa_set, openaudiobench_sets


def touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")


def test_openaudiobench_columns_aliases_and_default_audio_names(tmp_path):
    folder = tmp_path / "trivia_qa"
    (folder / "audios").mkdir(parents=True)
    (folder / "trivia_qa.csv").write_text(
        "id,Prompt_text,gold_answer,answer_aliases\n"
        "1,Who painted the Mona Lisa?,Leonardo da Vinci,Da Vinci;Leonardo\n"
        "2,What is 2+2?,4,\n"
        '3,"Unclosed quote, here,x,\n', encoding="utf-8")
    touch(folder / "audios" / "trivia_qa_0.mp3")
    touch(folder / "audios" / "trivia_qa_1.mp3")
    qa_set = load_qa_set(tmp_path, "trivia_qa")
    assert openaudiobench_sets(tmp_path) == ["trivia_qa"]
    assert qa_set.judge == "short_answer" and qa_set.layout == "OpenAudioBench"
    first, second = qa_set.items
    assert (first.item_id, first.question) == ("trivia_qa_0", "Who painted the Mona Lisa?")
    assert first.answer == "Leonardo da Vinci | aliases: Da Vinci;Leonardo"
    assert second.answer == "4" and second.audio.name == "trivia_qa_1.mp3"
    assert len(qa_set.problems) == 1 and qa_set.problems[0].startswith("trivia_qa_2: ")
    # The set folder itself works as --data too.
    assert load_qa_set(folder).items == qa_set.items


def test_meta_json_layout_with_a_set_description(tmp_path):
    (tmp_path / "audios").mkdir()
    for name in ("h1", "h2"):
        touch(tmp_path / "audios" / f"{name}.wav")
    (tmp_path / "meta.json").write_text(json.dumps([
        {"id": "h1", "text": "Q1", "answer": "A1", "knowledge": "Passage one."},
        {"id": "h2", "text": "Q2", "answer": "A2"},
        {"id": "h3", "text": "Q3", "answer": "A3"},  # no audio
        {"id": "../up", "text": "Q", "answer": "A"},  # not a plain file name
        {"id": "h4", "text": "Q4"},  # no answer
        "not an item",
    ]))
    (tmp_path / "set.json").write_text(json.dumps(
        {"name": "halueval", "search_folder": "facts"}))
    qa_set = load_qa_set(tmp_path)
    assert qa_set.name == "halueval" and qa_set.judge == "passage"
    assert [(i.item_id, i.knowledge) for i in qa_set.items] == [("h1", "Passage one."),
                                                                ("h2", None)]
    assert qa_set.search_folder == tmp_path / "facts"
    assert len(qa_set.problems) == 4
    assert any("h3: audio not found" in p for p in qa_set.problems)


def test_not_a_set(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "web_questions").mkdir()
    (tmp_path / "web_questions" / "web_questions.csv").write_text("question,answer\n")
    with pytest.raises(QaSetError, match="sets here: web_questions"):
        load_qa_set(tmp_path)
    with pytest.raises(QaSetError, match="not a folder"):
        load_qa_set(tmp_path / "missing")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "meta.json").write_text("{not json")
    with pytest.raises(QaSetError, match="cannot read"):
        load_qa_set(tmp_path / "bad")
