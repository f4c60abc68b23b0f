"""What the transcript panel shows, as plain data (made from pipeline events on the GUI side).

One entry per utterance, span, tool call or notice. Entries are immutable; an utterance
that grows (the model's words, the user's partial transcript) is replaced by a new entry
with the same `entry_id`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EntryKind = Literal["user", "assistant", "span", "tool", "notice"]


@dataclass(frozen=True)
class TranscriptEntry:
    entry_id: int
    kind: EntryKind
    text: str
    wall_time: float  # time.time() when it happened (shown as a local timestamp)
    conversation_s: float | None = None  # seconds into the conversation (frame time)
    source: str = ""  # spans: "typed", "dropped file: notes.txt", "llm+web_search", ...
    landed_frame: int | None = None  # spans: the frame before which its last chunk landed
    detail: str = ""  # tools: arguments and result size; notices: severity
    final: bool = True  # False while an utterance is still growing
