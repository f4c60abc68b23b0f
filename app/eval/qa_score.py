"""`eval qa`'s scoring step: the judge on each finished item of `<out>/<set>/<arm>/`, then the
metrics per set and arm (qa_metrics.py). Verdicts are kept in each item's score.json and
reused while the judge, its sample count and the prompt are the same."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from app.eval.judge import Judge, load_prompt
from app.eval.progress import ProgressBar
from app.eval.qa_metrics import ItemOutcome, item_row, summarise
from app.eval.qa_runner import ARMS, is_done


@dataclass(frozen=True)
class ArmResult:
    set_name: str
    arm: str
    judge_kind: str
    rows: list[dict]
    summary: dict
    problems: list[str]


def arm_folders(out: Path) -> list[tuple[str, str, Path]]:
    """(set, arm, folder) for every arm folder under `out` that holds a finished item."""
    found = []
    for run in sorted(Path(out).glob("*/*/run.json")):
        folder = run.parent
        if folder.name in ARMS and any(is_done(p) for p in folder.iterdir() if p.is_dir()):
            found.append((folder.parent.name, folder.name, folder))
    return found


def score_arm(folder: Path, judge: Judge, judge_id: str, kind: str | None = None,
              stream: TextIO | None = None) -> ArmResult:
    """Judge every finished item in an arm folder. `kind`: the judge prompt (default: the
    set's, from run.json)."""
    stream = stream if stream is not None else sys.stderr
    run = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    kind = kind or run.get("judge") or "short_answer"
    prompt = load_prompt(kind)
    items = sorted(p for p in folder.iterdir() if p.is_dir() and is_done(p))
    bar = ProgressBar(len(items), stream, f"judging {folder.parent.name}/{folder.name}")
    rows, problems = [], list(run.get("problems", []))
    for item_folder in items:
        try:
            outcome = _outcome(item_folder)
        except (OSError, ValueError, KeyError) as exc:
            problems.append(f"{item_folder.name}: cannot be scored ({exc})")
            bar.advance("skipped")
            continue
        key = {"judge": judge_id, "samples": judge.samples, "prompt": kind,
               "prompt_text": hash_text(prompt)}
        cached = _cached(item_folder / "score.json", key)
        if cached is None:
            resp = judge.grade(kind, outcome.question, outcome.answer, outcome.text)
            ref = (judge.grade(kind, outcome.question, outcome.answer, outcome.reference_text)
                   if outcome.spans else None)
            cached = {**key, "resp": resp.value, "resp_votes": resp.votes,
                      "ref": ref.value if ref else None, "ref_votes": ref.votes if ref else [],
                      "errors": resp.errors + (ref.errors if ref else [])}
            if not cached["errors"]:  # a failed request is asked again next time
                _write(item_folder / "score.json", cached)
            bar.advance(outcome.item_id)
        else:
            bar.advance(f"{outcome.item_id} (judged before)", timed=False)
        rows.append(item_row(outcome, cached["resp"], cached["ref"]))
    return ArmResult(folder.parent.name, folder.name, kind, rows, summarise(rows), problems)


def hash_text(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _outcome(folder: Path) -> ItemOutcome:
    item = json.loads((folder / "item.json").read_text(encoding="utf-8"))
    events = json.loads((folder / "events.json").read_text(encoding="utf-8"))
    return ItemOutcome(str(item["id"]), str(item["question"]), str(item["answer"]),
                       float(item["question_end_s"]), str(events.get("transcript", "")),
                       tuple(events.get("events", [])))


def _cached(path: Path, key: dict) -> dict | None:
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return saved if all(saved.get(k) == v for k, v in key.items()) else None


def _write(path: Path, payload: dict) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(payload, ensure_ascii=False, indent=1), encoding="utf-8")
    os.replace(partial, path)
