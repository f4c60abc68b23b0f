"""Full-Duplex-Bench v3's released layout, read: `{example_id}_{speaker}/input.wav` (48 kHz
human speech) and `metadata.json` (the scenario), and the result files a run writes beside
them (`result_<provider>.json`, as the benchmark's own runner and evaluators name them).

A scenario (the benchmark's JSON) has `id`, `domain`, `title`, `difficulty`,
`disfluency_features`, `state_rollback_test`, `dialogue` [{user, ai}] and
`expected_tool_calls` [{function, args}]. The released folders' metadata.json may lack the
expected calls; the benchmark's `benchmark_data_v2.json` has them (`--benchmark FILE`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The recogniser of a run unless `--asr` says otherwise (the paper's).
DEFAULT_STT = "kyutai-stt-1b-en_fr"
# Span positions prefilled between two frames (`--chunk-limit`), the same on every machine:
# measured, it followed the machine's load (1 to 256 within one run). 64 fits a frame on a
# GPU that runs the 7B in real time (the reference's timings: 57.5 ms for 64 positions and
# a step).
DEFAULT_CHUNK_LIMIT = 64

INPUT = "input.wav"
METADATA = "metadata.json"
FOLDER = re.compile(r"^(.+)_([0-9a-f]{24})$")  # {example_id}_{24-hex speaker id}
PROVIDER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class Fdb3DataError(ValueError):
    pass


@dataclass(frozen=True)
class Fdb3Sample:
    folder: Path
    example_id: str
    speaker: str
    scenario: dict[str, Any]  # its metadata.json, with the benchmark file's entry over it

    @property
    def input(self) -> Path:
        return self.folder / INPUT

    def result_path(self, provider: str) -> Path:
        return self.folder / f"result_{provider}.json"

    def output_path(self, provider: str) -> Path:
        return self.folder / f"output_{provider}.wav"

    def run_log_path(self, provider: str) -> Path:
        return self.folder / f"contextspan_run_{provider}.jsonl"


def check_provider(provider: str) -> str:
    if not PROVIDER.match(provider):
        raise Fdb3DataError(f"--provider {provider[:40]!r}: letters, digits, '_', '.' and "
                            "'-' only (it names the result files)")
    return provider


def load_benchmark(path: Path | None) -> dict[str, dict[str, Any]]:
    """The scenarios of a benchmark_data JSON file by id ({"scenarios": [...]} or a list)."""
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Fdb3DataError(f"cannot read the benchmark file {path}: {exc}") from exc
    items = data.get("scenarios", []) if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise Fdb3DataError(f"{path} holds no list of scenarios")
    return {str(s["id"]): s for s in items if isinstance(s, dict) and "id" in s}


def find_samples(root: Path, benchmark: Path | None = None
                 ) -> tuple[list[Fdb3Sample], list[tuple[str, str]]]:
    """The samples under `root` (sorted) and (folder, why) for each folder left out."""
    root = Path(root)
    if not root.is_dir():
        raise Fdb3DataError(f"{root} is not a folder")
    scenarios = load_benchmark(benchmark)
    samples, left_out = [], []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        named = FOLDER.match(folder.name)
        if named is None:
            continue  # not a sample's folder (the benchmark's layout names them so)
        example_id, speaker = named.group(1), named.group(2)
        if not (folder / INPUT).is_file():
            left_out.append((folder.name, f"no {INPUT}"))
            continue
        scenario: dict[str, Any] = {}
        meta = folder / METADATA
        if meta.is_file():
            try:
                loaded = json.loads(meta.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                left_out.append((folder.name, f"unreadable {METADATA}: {exc}"))
                continue
            if isinstance(loaded, dict):
                scenario = loaded
        scenario = {**scenario, **scenarios.get(example_id, {})}
        scenario.setdefault("id", example_id)
        samples.append(Fdb3Sample(folder, example_id, speaker, scenario))
    return samples, left_out
