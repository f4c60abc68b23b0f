"""A real browser on `/ws`: headless Chromium with a fake microphone runs a page that speaks
the reference protocol as its description reads (tests/server/browser/page.html, ours),
against `serve --model tiny-cs` in its own process, as a user of the reference's page would:
1. "Clone my voice": connect, record 2.56 s from the microphone on `ready`, send `clone` and
   the recording, get `cloned`;
2. "Connect" on that connection (the voice is on it): context, the microphone once, talk;
   the model's <ret> (forced at 1 s: random weights never ask) is answered `no_span`
   (the server has no LLM); stop, hang up;
3. "Connect" again, a new connection: one `ready`, the microphone once, talk, hang up.
What a user would notice is checked by counting, never by the clock: one `ready` and one
microphone per Connect, every frame the page sent counted by the server and answered with
audio that the page played, no error (the reference's page got "persona: the conversation
has started" and three microphones at once), and ~12.5 frames per second of the page's own
audio clock (three microphones would be ~37.5).

One Chromium for all of it (it is heavy on a shared 2-core machine): about 30 s here.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import aiohttp
import pytest
import sphn
from aiohttp import web

from tests.serve_process import ServeProcess
from tests.server.browser.devtools import Chromium, chromium_path
from tests.server.test_server_page_protocol import speech_like

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    chromium_path() is None, reason="needs Debian's chromium (installer/system_packages.sh "
                                    "tests installs it)")]

PAGE = Path(__file__).parent / "browser"
TOKEN = "browser-test-7c2e"
TALK_FRAMES = 25  # 2 s: past the forced <ret> at 1 s (frame 12)
WAIT_S = 120.0  # the shared machine may be slow; a condition that holds ends the wait


async def _serve_page() -> tuple[web.AppRunner, str]:
    """The test page on its own port of the loopback (another origin than the server's)."""
    app = web.Application()
    app.router.add_static("/", PAGE)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def _health(url: str) -> dict:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/health") as answer:
        return await answer.json()


async def _free(url: str) -> dict:
    """/health once the engine is free again (a hung-up conversation's engine stops within
    moments; a Connect before that is answered `busy`)."""
    for _ in range(600):
        status = await _health(url)
        if not status["busy"]:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError("the engine stayed busy after the page hung up")


async def _talk_then_hang_up(browser: Chromium, server_url: str, frames_before: int) -> None:
    await browser.wait_for(f"report.framesSent >= {frames_before + TALK_FRAMES}", WAIT_S,
                           "talking")
    await browser.evaluate("stopTalking()")
    await browser.wait_for("report.unanswered === 0 && "
                           "report.audioFrames === report.framesSent", WAIT_S,
                           "every frame answered and every ret answered")
    sent = await browser.evaluate("report.framesSent")
    for _ in range(600):  # a frame's statistics follow its audio by moments
        if (await _health(server_url))["frames_total"] >= sent:
            break
        await asyncio.sleep(0.05)
    await browser.evaluate("hangUp()")
    await browser.wait_for("report.closed", WAIT_S, "the connection closed")


def test_the_reference_flow_from_a_browser_clone_talk_and_a_ret(tiny_cs_folder, data_dir,
                                                               tmp_path):
    microphone = tmp_path / "microphone.wav"
    sphn.write_wav(str(microphone), speech_like(4.0, seed=3), 24000)

    async def main() -> tuple[dict, int, dict, dict, list[str]]:
        page_runner, page_url = await _serve_page()
        with ServeProcess(data_dir, TOKEN, args=("--model", "tiny-cs", "--ret-at", "1.0")) \
                as server:
            server_ws = server.url.replace("http", "ws", 1)
            browser = Chromium(f"{page_url}/page.html?server={server_ws}&token={TOKEN}",
                               microphone)
            await browser.start()
            try:
                await browser.wait_for("typeof window.cloneVoice === 'function'", WAIT_S,
                                       "the page loaded")
                await browser.evaluate("cloneVoice()")
                await browser.wait_for("report.cloned", WAIT_S, "the voice cloned")
                await browser.evaluate("talk()")  # on the connection the voice is on
                await _talk_then_hang_up(browser, server.url, 0)
                first = await _free(server.url)
                sent_first = await browser.evaluate("report.framesSent")
                await browser.evaluate("talk()")  # a new connection
                await _talk_then_hang_up(browser, server.url, sent_first)
                report = await browser.evaluate("report")
                return report, sent_first, first, await _free(server.url), browser.console
            finally:
                await browser.stop()
                await page_runner.cleanup()

    report, sent_first, first, last, console = asyncio.run(main())
    assert report["errors"] == [], (report["errors"], console)
    assert report["readys"] == [1, 1] and report["micOpens"] == [1, 1], report
    frames = math.ceil(report["cloneSamples"] / 1920)
    assert report["cloned"] == {"type": "cloned", "frames": frames,
                                "seconds": round(frames * 0.08, 2)}
    # The forced <ret> of each connection, answered no_span (no LLM side). The tiny model's
    # random weights may ask once more on their own: what it hears is the browser's live
    # audio, whose frames fall differently on a busy machine.
    assert report["events"].count("ret") >= 2 and report["events"].count("no_span") >= 2
    assert "persona" not in " ".join(report["errors"])
    # Every frame the page sent reached the engine (the server's own count) and came back.
    assert last["frames_total"] == report["framesSent"] == report["audioFrames"]
    assert first["frames_total"] >= TALK_FRAMES and last["sessions_total"] == first[
        "sessions_total"] + 1
    assert report["framesPlayed"] > 0
    # Frames per second of the page's audio clock while it talked, last connection.
    assert first["frames_total"] == sent_first
    per_second = (report["framesSent"] - sent_first) / report["talkSeconds"]
    assert 11.0 <= per_second <= 14.0, per_second
