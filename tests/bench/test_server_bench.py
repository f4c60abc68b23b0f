"""`bench server` says what the link carries per stream (audio, text, control) each way, and
with the server's recognition, the same conversation with each word sent once (the app's
`words`) and event by event: counts of bytes, never times."""

from __future__ import annotations

import pytest

from app.server.bench import format_server_bench, run_server_bench

pytestmark = pytest.mark.slow


def test_the_link_per_stream_with_the_servers_recognition(tiny_folder, tiny_stt_built):
    result = run_server_bench(frames=50, most_conversations=0, asr="tiny-stt")
    streams = result["bytes_per_second_by_stream"]
    words, events = streams["ws_opus"], streams["ws_opus_event_by_event"]
    assert set(words["down"]) >= {"audio", "text"} and words["up"]["audio"] > 0
    assert words["down"]["audio"] == events["down"]["audio"]  # the same audio both ways
    assert words["down"]["text"] * 2 < events["down"]["text"], streams
    text = format_server_bench(result)
    assert "ws_opus by stream (recognition tiny-stt on the server)" in text
    assert "ws_opus_event_by_event by stream" in text and "text" in text
