"""The model's and the recognition's words, each sent once and a few frames' in one message:
`text` and `user_text` events as `words` (app/wire/events.py) on the server's side of a
connection whose client asked for them, and back to the very same events, in the same order,
on the client's.

Why: `user_text` carries the whole utterance so far with every word the recogniser adds,
and every event is a message of its own whose fields outweigh a word. With a word a frame
each way, that was most of the bytes a conversation sent down. Here a `user_text` is an
item saying how many characters of its utterance as last said still stand (`keep`: a
recogniser may revise its last words), the characters after them and its time, so the
reader rebuilds each text exactly; a `text` is its delta and the audio frames sent before
it, so the client gives it the frame its arrival would have given it. The writer holds the
items for up to `HOLD_FRAMES` frames of audio and sends them in one message. What it holds
goes out before anything else it writes (another event, a `ready`) and at once with an
utterance's final, so every event keeps its order and no turn ends later; the words' times
and frames are their own, so the conversation reads them as it read the events.

Both sides forget an utterance at its final and everything at a new conversation's `ready`
(the writer when it writes one, the reader when it reads one), so they stay in step. The
writer remembers few utterances and the reader more: an utterance the writer forgot is sent
whole (`keep` 0), which the reader rebuilds whatever it remembers.
"""

from __future__ import annotations

import os
from collections import OrderedDict

from app.wire import events as wire

HOLD_FRAMES = 4  # 320 ms: how long words may wait to share a message
WRITER_UTTERANCES = 8  # utterances in progress the server remembers (one, mostly)
READER_UTTERANCES = 64  # more than the writer's: the reader never forgets one it needs
_FINAL = 1  # a `user_text` item's fifth element: the utterance's last


class WordsWriter:
    """The server's side: each call returns the `words` messages due now."""

    def __init__(self) -> None:
        self._said: OrderedDict[int, str] = OrderedDict()  # utt -> its text as last sent
        self._held: list[list[object]] = []  # items not yet sent
        self._frames_held = 0
        self._audio = 0  # frames of this conversation's audio sent

    def new_conversation(self) -> list[wire.Words]:
        """What was held (the ending conversation's), then all forgotten."""
        out = self.flush()
        self._said.clear()
        self._audio = 0
        return out

    def text(self, event: wire.Text) -> list[wire.Words]:
        self._held.append([event.delta, self._audio])
        return []

    def user_text(self, event: wire.UserText) -> list[wire.Words]:
        before = self._said.pop(event.utt, "")
        keep = len(os.path.commonprefix([before, event.text]))
        item: list[object] = [event.utt, keep, event.text[keep:], event.t]
        if event.final:
            self._held.append([*item, _FINAL])
            return self.flush()  # the turn's end waits for nothing
        self._said[event.utt] = event.text
        while len(self._said) > WRITER_UTTERANCES:
            self._said.popitem(last=False)
        self._held.append(item)
        return []

    def frame(self) -> list[wire.Words]:
        """A frame of audio goes out next: the held items go before it once they waited
        HOLD_FRAMES frames."""
        self._audio += 1
        if not self._held:
            return []
        self._frames_held += 1
        return self.flush() if self._frames_held >= HOLD_FRAMES else []

    def flush(self) -> list[wire.Words]:
        """Everything held, now (before another event)."""
        if not self._held:
            return []
        held, self._held, self._frames_held = self._held, [], 0
        return [wire.Words(held)]


class WordsReader:
    """The client's side: each `words` message as the `text` and `user_text` events it
    stands for (up to the first item a server would not send)."""

    def __init__(self) -> None:
        self._heard: OrderedDict[int, str] = OrderedDict()  # utt -> its text so far

    def new_conversation(self) -> None:
        self._heard.clear()

    def events(self, message: wire.Words) -> list[wire.Text | wire.UserText]:
        items = message.items if isinstance(message.items, list) else []
        out: list[wire.Text | wire.UserText] = []
        for item in items:
            event = self._event(item)
            if event is None:
                break
            out.append(event)
        return out

    def _event(self, item: object) -> wire.Text | wire.UserText | None:
        if not isinstance(item, list):
            return None
        if len(item) == 2:
            delta, audio = item
            if isinstance(delta, str) and _count(audio) is not None:
                return wire.Text(delta, audio)
            return None
        if len(item) not in (4, 5) or (len(item) == 5 and item[4] != _FINAL):
            return None
        utt, keep, added, t = item[:4]
        if (_count(utt) is None or _count(keep) is None or not isinstance(added, str)
                or isinstance(t, bool) or not isinstance(t, (int, float))):
            return None
        text = self._heard.pop(utt, "")[:keep] + added
        final = len(item) == 5
        if not final:
            self._heard[utt] = text
            while len(self._heard) > READER_UTTERANCES:
                self._heard.popitem(last=False)
        return wire.UserText(utt, final, t, text)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None
