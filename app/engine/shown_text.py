"""Which of the model's text tokens the transcript shows (the frame loop, local_engine.py)."""

from __future__ import annotations

from collections.abc import Container

import sentencepiece


def shown_text_id(text_id: int | None, tokenizer: sentencepiece.SentencePieceProcessor,
                  control_ids: Container[int]) -> int | None:
    """The token to show, or None for padding, span delimiters, `<ret>` and the control,
    unknown and byte pieces of the tokenizer (the model says them, nobody reads them)."""
    if text_id is None or text_id in control_ids:
        return None
    if (tokenizer.is_control(text_id) or tokenizer.is_unknown(text_id)
            or tokenizer.is_byte(text_id)):
        return None
    return text_id
