"""How many conversations one engine holds on a device, by memory: `serve --slots N`'s N.

Once per engine: the weights, Mimi's, the shared copy of one row's state that every row's
reads run on (torch_runtime.py: a KV ring's worth), and the workspace allowance. Per
conversation: its KV ring (widened for the longest read), Mimi's streaming state for its
row, and an allowance for the rest (its share of the batch's activations and the graphs'
pools). The allowance is the one measurement there is: on the H200 (docs/serving.md) the
7B took 2.00 GiB a conversation at 8 and 16 rows, of which its KV ring is 1.89 GiB and its
Mimi state a few MB, leaving about 0.1 GiB; that was before the reads' graphs were shared
(issue 33), so it is an upper bound. `bench gpu --slots` measures each part again
(kv_per_slot_gb, codec_per_slot_gb, rest_per_slot_gb).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.plan.memory_plan import PRECISIONS, ModelShape, Precision, format_gb

REST_PER_CONVERSATION_BYTES = int(0.11 * 2**30)


@dataclass(frozen=True)
class SlotCapacity:
    conversations: int  # the most that fit (0: not even one)
    once_bytes: int  # weights, Mimi, the shared read copy, the workspace
    per_conversation_bytes: int
    kv_bytes: int  # of which its KV ring
    codec_bytes: int  # and Mimi's state for its row

    def sentence(self, recogniser: bool) -> str:
        rest = self.per_conversation_bytes - self.kv_bytes - self.codec_bytes
        also = " and its recogniser's rows" if recogniser else ""
        return (f"Conversations at once on one engine (serve --slots N), by memory: "
                f"{self.conversations} (each {format_gb(self.per_conversation_bytes)} GB: its "
                f"KV ring {format_gb(self.kv_bytes)}, Mimi {format_gb(self.codec_bytes)}, about "
                f"{format_gb(rest)} more{also}; once {format_gb(self.once_bytes)} GB)")


def conversations_that_fit(speech: ModelShape, precision: Precision, usable_bytes: int,
                           stt: ModelShape | None = None) -> SlotCapacity:
    """The most conversations of `speech` at `precision` (and with `stt`'s recogniser, one
    row each) within `usable_bytes`."""
    kv = int(speech.cache_values * precision.cache_bits / 8)
    codec = speech.codec_cache_values * 4
    per = kv + codec + REST_PER_CONVERSATION_BYTES
    # bytes_at counts the model with one row's state: that row's KV ring stands for the
    # shared read copy, its Mimi state goes per conversation.
    once = speech.bytes_at(precision) - codec
    if stt is not None:  # the recogniser (in bf16): its weights once, a row each
        stt_row = stt.cache_values * 2 + stt.codec_cache_values * 4
        once += stt.bytes_at(PRECISIONS["bf16"]) - stt_row
        per += stt_row
    fits = max(0, (usable_bytes - once) // per)
    return SlotCapacity(int(fits), once, per, kv, codec)
