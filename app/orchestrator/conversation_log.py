"""The recent conversation, as the LLM sees it: the user's utterances and the model's words."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from app.llm.backend import ChatMessage

ASSISTANT_GAP_FRAMES = 12  # a pause of ~1 s in the model's text starts a new entry


@dataclass
class _Entry:
    role: str  # "user" or "assistant"
    text: str
    last_frame: int = -1


class ConversationLog:
    def __init__(self, max_entries: int = 40) -> None:
        self._entries: deque[_Entry] = deque(maxlen=max_entries)

    def add_user(self, text: str) -> None:
        text = " ".join(text.split())
        if text:
            self._entries.append(_Entry("user", text))

    def add_assistant_piece(self, piece: str, frame_index: int) -> None:
        last = self._entries[-1] if self._entries else None
        if (last is None or last.role != "assistant"
                or frame_index - last.last_frame > ASSISTANT_GAP_FRAMES):
            last = _Entry("assistant", "")
            self._entries.append(last)
        last.text += piece
        last.last_frame = frame_index

    def messages(self, max_chars: int = 4000) -> list[ChatMessage]:
        """The most recent entries that fit in `max_chars`, oldest first."""
        picked: list[ChatMessage] = []
        used = 0
        for entry in reversed(self._entries):
            text = " ".join(entry.text.split())
            if not text:
                continue
            if used + len(text) > max_chars and picked:
                break
            picked.append(ChatMessage("user" if entry.role == "user" else "assistant",
                                      text[-max_chars:]))
            used += len(text)
        return list(reversed(picked))
