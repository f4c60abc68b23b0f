"""Full-Duplex-Bench v1 / v1.5 sample folders: where they are, what task each belongs to.

A sample is a folder holding `input.wav` (the user's stream), found anywhere under the data
root (`v1_0/candor_turn_taking/12/input.wav`, or `candor_turn_taking/12/input.wav` when the
root is `v1_0`). Its task is the folder that holds the sample folders. The output tree
mirrors the data tree, so `<out>/<task>` is a folder the benchmark's own scripts take as
`--root_dir`; nothing else is written inside a task folder (their scripts list it and treat
every entry as a sample) and no sub-folder is made inside a sample (their interruption
scorer walks every folder under its root).

Which v1 metric a sample gets is read from the annotation file beside it (the benchmark's
own names): `pause.json` pause handling, `turn_taking.json` smooth turn-taking,
`interrupt.json` user interruption; a task folder named "...backchannel" without
`clean_input.wav` is v1's backchannel set. v1.5 samples (`clean_input.wav` beside the
input) are rendered twice, the second time from the clean input into `clean_output.wav`,
and left to the benchmark's v1.5 scripts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

INPUT = "input.wav"
CLEAN_INPUT = "clean_input.wav"
OUTPUT = "output.wav"
CLEAN_OUTPUT = "clean_output.wav"
# Model outputs and their ASR transcripts in a data folder belong to some other run.
NOT_COPIED = frozenset({OUTPUT, CLEAN_OUTPUT, "output.json", "clean_output.json"})

# The prompts the benchmark gives for PersonaPlex-style models, as the reference uses them.
TEACHER_PROMPT = ("You are a wise and friendly teacher. Answer questions or provide advice "
                  "in a clear and engaging way.")
CONVERSATION_PROMPT = "You enjoy having a good conversation."
REFERENCE_SEED = 42424242  # the reference's benchmark seed
PROFILE_CITY = "Seoul"  # the reference's user profile for every run


class Kind(enum.Enum):
    PAUSE_HANDLING = "pause_handling"
    SMOOTH_TURN_TAKING = "smooth_turn_taking"
    USER_INTERRUPTION = "user_interruption"
    BACKCHANNEL = "backchannel"
    V1_5 = "v1.5"  # rendered for the benchmark's own v1.5 scripts; no v1 metric
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Sample:
    folder: Path  # the sample folder (in the data tree, or in the output tree)
    rel: PurePosixPath  # its path under the root, e.g. candor_turn_taking/12

    @property
    def task(self) -> str:
        """The task folder's path under the root, e.g. candor_turn_taking."""
        return str(self.rel.parent)

    @property
    def id(self) -> str:
        return self.rel.name

    @property
    def has_clean_input(self) -> bool:
        return (self.folder / CLEAN_INPUT).is_file()


def find_samples(root: Path, tasks: tuple[str, ...] = (), marker: str = INPUT) -> list[Sample]:
    """Every folder under `root` holding `marker`, sorted by task then id (numbers in order).

    A sample's path always has a task part: when `root` is itself a task folder, its name
    is kept (`candor_turn_taking/12`), so an output root is never a task folder.

    `tasks` keeps the samples whose task path, or its last folder name, is one of them.
    """
    root = Path(root)
    found = []
    for path in root.rglob(marker):
        if not path.is_file() or any(part.startswith(".") for part in
                                     path.relative_to(root).parts):
            continue
        parts = path.parent.relative_to(root).parts
        if len(parts) < 2:  # the root is a task (or a sample) folder: keep its name(s)
            parts = root.resolve().parts[len(parts) - 2:] + parts
        sample = Sample(path.parent, PurePosixPath(*parts))
        if tasks and sample.task not in tasks and sample.rel.parent.name not in tasks:
            continue
        found.append(sample)
    return sorted(found, key=lambda s: (s.task, _natural(s.id)))


def _natural(name: str) -> tuple:
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def prompt_for(sample: Sample) -> str:
    """The teacher prompt for interruption tasks, else the conversation prompt (both as
    the reference renders: by the word "interrupt" in the sample's path)."""
    return TEACHER_PROMPT if "interrupt" in str(sample.rel).lower() else CONVERSATION_PROMPT


def kind_of(sample: Sample) -> Kind:
    folder = sample.folder
    if (folder / CLEAN_INPUT).is_file() or (folder / "metadata.json").is_file():
        return Kind.V1_5
    if (folder / "interrupt.json").is_file():
        return Kind.USER_INTERRUPTION
    if (folder / "turn_taking.json").is_file():
        return Kind.SMOOTH_TURN_TAKING
    if (folder / "pause.json").is_file():
        return Kind.PAUSE_HANDLING
    if "backchannel" in sample.rel.parent.name.lower():
        return Kind.BACKCHANNEL
    return Kind.UNKNOWN
