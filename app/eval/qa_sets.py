"""Spoken QA sets from local folders, in the two layouts the paper's benchmark reads.

- OpenAudioBench: `<root>/<set>/<set>.csv` with the audio in `<root>/<set>/audios/`. The
  question column is the first whose name starts with question/prompt/text/instruction/
  query; the answer column the first whose name holds "answer" or "gold"; an alias column
  adds "| aliases: ..." to the gold answer (the judge sees every valid answer). The audio is
  the basename of `audio_filename`, else `<set>_<row>.mp3`; the item id is `<set>_<row>`.
- meta.json: `[{id, text, answer, knowledge?}]` with `audios/<id>.wav` (HaluEvalAudio, the
  math sets, and the sets `eval make-set` writes). `knowledge` is the gold passage.
  An optional `set.json` beside it names the set, its judge and a folder for local search.

A bad row or a missing file is a problem reported with the item, never a failed load.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

QUESTION_PREFIXES = ("question", "prompt", "text", "instruction", "query")
MATH_SETS = ("math", "addsub", "multiarith", "singleeq", "singleq", "svamp", "gsm8k")


class QaSetError(ValueError):
    """The folder is not a QA set in either layout."""


@dataclass(frozen=True)
class QaItem:
    item_id: str
    audio: Path
    question: str
    answer: str
    knowledge: str | None = None  # the gold passage, where the set has one


@dataclass(frozen=True)
class QaSet:
    name: str
    judge: str  # the judge prompt's name (app/eval/prompts/<judge>.txt)
    items: tuple[QaItem, ...]
    problems: tuple[str, ...] = ()  # items left out, one line each
    search_folder: Path | None = None  # the only place the answers are (eval make-set)
    layout: str = "meta.json"


@dataclass
class _Found:
    items: list[QaItem] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def judge_for(set_name: str) -> str:
    """The judge prompt for a set, by its name (the reference's pairing of sets and judges)."""
    name = set_name.lower()
    if "halueval" in name:
        return "passage"
    if any(math in name for math in MATH_SETS):
        return "math"
    return "short_answer"


def load_qa_set(root: Path, set_name: str | None = None) -> QaSet:
    """The set at `root`: a meta.json folder, an OpenAudioBench set folder (`<set>/<set>.csv`)
    or an OpenAudioBench root with `set_name`."""
    root = Path(root)
    if not root.is_dir():
        raise QaSetError(f"{root} is not a folder")
    if (root / "meta.json").is_file():
        return _load_meta(root)
    if set_name is None and (root / f"{root.name}.csv").is_file():
        set_name, root = root.name, root.parent
    if set_name is not None:
        if not (root / set_name / f"{set_name}.csv").is_file():
            raise QaSetError(f"{root / set_name / (set_name + '.csv')} not found")
        return _load_openaudiobench(root, set_name)
    found = sorted(p.parent.name for p in root.glob("*/*.csv") if p.stem == p.parent.name)
    hint = f" (sets here: {', '.join(found)}; name one with --set)" if found else ""
    raise QaSetError(f"{root} holds neither meta.json nor <set>/<set>.csv{hint}")


def openaudiobench_sets(root: Path) -> list[str]:
    """The OpenAudioBench sets under `root` (folders holding `<name>/<name>.csv`)."""
    return sorted(p.parent.name for p in Path(root).glob("*/*.csv") if p.stem == p.parent.name)


def _load_openaudiobench(root: Path, set_name: str) -> QaSet:
    folder = root / set_name
    found = _Found()
    try:
        with (folder / f"{set_name}.csv").open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            keys = list(reader.fieldnames or [])
            question_key = next((k for k in keys if k.strip().lower().startswith(
                QUESTION_PREFIXES)), None)
            answer_key = next((k for k in keys if "answer" in k.lower() or "gold" in k.lower()),
                              None)
            alias_key = next((k for k in keys if "alias" in k.lower()), None)
            if question_key is None:
                raise QaSetError(f"{set_name}.csv has no question column (one starting with "
                                 f"{', '.join(QUESTION_PREFIXES)}): {', '.join(keys)}")
            for index, row in enumerate(_rows(reader, found, set_name)):
                if row is None:
                    continue
                _add_row(found, folder, set_name, index, row, question_key, answer_key,
                         alias_key)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise QaSetError(f"cannot read {folder / (set_name + '.csv')}: {exc}") from exc
    return QaSet(set_name, judge_for(set_name), tuple(found.items), tuple(found.problems),
                 layout="OpenAudioBench")


def _rows(reader: csv.DictReader, found: _Found, set_name: str):
    """Each row, or None for one the csv module could not split (reported, then skipped)."""
    index = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            found.problems.append(f"{set_name}_{index}: unreadable csv row ({exc})")
            row = None
        yield row
        index += 1


def _add_row(found: _Found, folder: Path, set_name: str, index: int, row: dict,
             question_key: str, answer_key: str | None, alias_key: str | None) -> None:
    item_id = f"{set_name}_{index}"
    if None in row or any(v is None for v in row.values()):  # too many or too few fields
        found.problems.append(f"{item_id}: unreadable csv row (wrong number of fields)")
        return
    audio_name = Path((row.get("audio_filename") or "").strip()).name or f"{set_name}_{index}.mp3"
    audio = folder / "audios" / audio_name
    if not audio.is_file():
        found.problems.append(f"{item_id}: audio not found ({audio})")
        return
    gold = (row.get(answer_key) or "").strip() if answer_key else ""
    if alias_key and (row.get(alias_key) or "").strip():
        gold = f"{gold} | aliases: {row[alias_key].strip()}"
    found.items.append(QaItem(item_id, audio, row[question_key].strip(), gold))


def _load_meta(root: Path) -> QaSet:
    try:
        entries = json.loads((root / "meta.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise QaSetError(f"cannot read {root / 'meta.json'}: {exc}") from exc
    if not isinstance(entries, list):
        raise QaSetError(f"{root / 'meta.json'} must hold a list of items")
    described = _set_description(root)
    name = str(described.get("name") or root.name)
    found = _Found()
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        problem = _meta_problem(entry, seen)
        if problem:
            found.problems.append(f"{root.name} item {index}: {problem}")
            continue
        item_id = str(entry["id"])
        seen.add(item_id)
        audio = root / "audios" / f"{item_id}.wav"
        if not audio.is_file():
            found.problems.append(f"{item_id}: audio not found ({audio})")
            continue
        knowledge = entry.get("knowledge")
        found.items.append(QaItem(item_id, audio, str(entry["text"]), str(entry["answer"]),
                                  str(knowledge) if knowledge else None))
    search = described.get("search_folder")
    return QaSet(name, str(described.get("judge") or judge_for(name)), tuple(found.items),
                 tuple(found.problems), root / search if search else None)


def _meta_problem(entry: object, seen: set[str]) -> str | None:
    if not isinstance(entry, dict):
        return "not an object"
    missing = [k for k in ("id", "text", "answer") if k not in entry]
    if missing:
        return f"missing {', '.join(missing)}"
    item_id = str(entry["id"])
    # The id names a file and an output folder: nothing that climbs out of them.
    if not re.fullmatch(r"[\w.-]+", item_id) or item_id in (".", ".."):
        return f"id {item_id!r} is not a plain file name"
    if item_id in seen:
        return f"id {item_id!r} appears twice"
    return None


def _set_description(root: Path) -> dict:
    path = root / "set.json"
    if not path.is_file():
        return {}
    try:
        described = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise QaSetError(f"cannot read {path}: {exc}") from exc
    return described if isinstance(described, dict) else {}
