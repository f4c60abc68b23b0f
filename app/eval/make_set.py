"""`eval make-set`: a span-only spoken QA set. Each item is a fresh random fact (an invented
name with a code, a time or a person) that no model can know: the question is spoken by
espeak-ng, and the fact is written only into a folder the set creates for the LLM's local
search tool. Injected spans are the only way to the answer, so the no-inject arm scores near
zero and the inject arm measures "answers from the span" with no parametric knowledge.

The set is in the meta.json layout (qa_sets.py) with a set.json naming its judge prompt
(span_fact) and its search folder; the gold passage (`knowledge`) is the fact itself.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from app.audio_file import read_mono_24k, write_wav_24k

SET_NAME = "span_facts"
FACTS_FOLDER = "facts"
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr",
           "gr", "kr", "tr", "st", "sk", "pl")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou", "ea")
_CODAS = ("", "", "n", "r", "l", "s", "th", "nd", "m")
_LETTERS = "BCDFGHJKLMNPRSTVWXZ"  # no vowels: a code never spells a word
_PLACES = ("vault", "archive", "depot", "lighthouse", "observatory", "greenhouse")
_GROUPS = ("committee", "choir", "rowing club", "chess circle", "book club")
_ROLES = ("keeper", "curator", "treasurer", "head gardener")


class MakeSetError(RuntimeError):
    pass


@dataclass(frozen=True)
class Fact:
    item_id: str
    question: str
    answer: str
    sentence: str  # the fact as written into the search folder (and the gold passage)
    topic: str  # the invented name the question is about


def invented_name(rng: random.Random, syllables: int = 2) -> str:
    word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                   for _ in range(syllables))
    return word.capitalize()


def make_fact(rng: random.Random, index: int) -> Fact:
    """One fact of a kind chosen in turn: a code, a time, a person's name."""
    topic = invented_name(rng, rng.choice((2, 3)))
    item_id = f"fact_{index:04d}"
    kind = index % 3
    if kind == 0:
        place = rng.choice(_PLACES)
        code = f"{rng.choice(_LETTERS)}{rng.choice(_LETTERS)}-{rng.randrange(1000, 10000)}"
        return Fact(item_id, f"What is the access code of the {topic} {place}?", code,
                    f"The access code of the {topic} {place} is {code}.", topic)
    if kind == 1:
        group = rng.choice(_GROUPS)
        when = f"{rng.randrange(1, 13)}:{rng.randrange(0, 60):02d} {rng.choice(('AM', 'PM'))}"
        return Fact(item_id, f"At what time does the {topic} {group} meet?", when,
                    f"The {topic} {group} meets at {when}.", topic)
    role = rng.choice(_ROLES)
    place = rng.choice(_PLACES)
    person = f"{invented_name(rng)} {invented_name(rng, 3)}"
    return Fact(item_id, f"Who is the {role} of the {topic} {place}?", person,
                f"The {role} of the {topic} {place} is {person}.", topic)


def make_facts(count: int, seed: int | None) -> list[Fact]:
    rng = random.Random(seed)
    facts: list[Fact] = []
    topics: set[str] = set()
    while len(facts) < count:
        fact = make_fact(rng, len(facts))
        if fact.topic not in topics:  # one fact per invented name: a search finds one file
            topics.add(fact.topic)
            facts.append(fact)
    return facts


def speak(text: str, path: Path, voice: str = "en-us", words_per_minute: int = 150) -> None:
    """espeak-ng's voice, as a 24 kHz mono WAV."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise MakeSetError("espeak-ng is not installed (Debian/Ubuntu: apt install espeak-ng)")
    with tempfile.TemporaryDirectory() as scratch:
        raw = Path(scratch) / "raw.wav"
        try:
            subprocess.run([espeak, "-v", voice, "-s", str(words_per_minute), "-w", str(raw),
                            text], check=True, timeout=60, capture_output=True)
        except (subprocess.SubprocessError, OSError) as exc:
            raise MakeSetError(f"espeak-ng failed on {text!r}: {exc}") from exc
        write_wav_24k(path, read_mono_24k(raw))


def make_span_set(out: Path, count: int, seed: int | None = None, name: str = SET_NAME,
                  voice: str = "en-us") -> Path:
    """Write the set into `out` (which must be empty or new) and return it."""
    out = Path(out)
    if count < 1:
        raise MakeSetError("--count must be at least 1")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise MakeSetError(f"{out} exists and is not an empty folder: choose a new one")
    facts = make_facts(count, seed)
    (out / "audios").mkdir(parents=True, exist_ok=True)
    (out / FACTS_FOLDER).mkdir()
    for fact in facts:
        speak(fact.question, out / "audios" / f"{fact.item_id}.wav", voice)
        (out / FACTS_FOLDER / f"{fact.item_id}.txt").write_text(fact.sentence + "\n",
                                                                 encoding="utf-8")
    meta = [{"id": f.item_id, "text": f.question, "answer": f.answer, "knowledge": f.sentence}
            for f in facts]
    (out / "meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1),
                                   encoding="utf-8")
    (out / "set.json").write_text(json.dumps({
        "name": name, "judge": "span_fact", "search_folder": FACTS_FOLDER, "seed": seed,
        "made_by": "python main.py eval make-set",
        "note": "Random facts: only the local search folder holds the answers.",
    }, indent=1), encoding="utf-8")
    return out
