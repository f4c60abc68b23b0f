"""Headless Chromium for the tests, driven over the Chrome DevTools protocol (a WebSocket:
aiohttp's client, no driver package): start it on a page, evaluate JavaScript in the page,
stop it. Debian's `chromium` (installer/system_packages.sh tests)."""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

START_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 30.0

# Headless on a machine with no display, no GPU and no network beyond the loopback (the
# background services would only knock at closed doors), with a fake microphone that the
# page may use without asking.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
         "--autoplay-policy=no-user-gesture-required", "--mute-audio",
         "--remote-debugging-port=0")


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    def __init__(self, url: str, microphone_wav: Path | None = None) -> None:
        """`microphone_wav`: what the fake microphone says (looped); default a beep."""
        self.url = url
        self.microphone_wav = microphone_wav
        self._profile = Path(tempfile.mkdtemp(prefix="contextspan-chromium-"))
        self._process: subprocess.Popen | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)
        self._answers: dict[int, asyncio.Future] = {}
        self._reader: asyncio.Task | None = None
        self.console: list[str] = []  # the page's console and uncaught errors

    async def start(self) -> None:
        path = chromium_path()
        assert path, "chromium is not installed (installer/system_packages.sh tests)"
        flags = [*FLAGS, f"--user-data-dir={self._profile}"]
        if self.microphone_wav is not None:
            flags.append(f"--use-file-for-fake-audio-capture={self.microphone_wav}")
        self._process = subprocess.Popen([path, *flags, self.url], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
        port = await self._devtools_port()
        self._session = aiohttp.ClientSession()
        page_ws = await self._page_socket(port)
        self._ws = await self._session.ws_connect(page_ws, max_msg_size=0)
        self._reader = asyncio.create_task(self._read())
        await self.call("Runtime.enable")

    async def _devtools_port(self) -> int:
        """Chromium writes the port it took to DevToolsActivePort in its profile."""
        marker = self._profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._process is not None and self._process.poll() is None, \
                "chromium ended at its start"
            if marker.is_file():
                first = marker.read_text().split("\n", 1)[0].strip()
                if first.isdigit():
                    return int(first)
            await asyncio.sleep(0.1)
        raise AssertionError("chromium did not open its DevTools port")

    async def _page_socket(self, port: int) -> str:
        assert self._session is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            async with self._session.get(f"http://127.0.0.1:{port}/json/list") as answer:
                targets = await answer.json()
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            await asyncio.sleep(0.1)
        raise AssertionError("chromium opened no page")

    async def _read(self) -> None:
        assert self._ws is not None
        async for message in self._ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            future = self._answers.pop(data.get("id"), None)
            if future is not None and not future.done():
                future.set_result(data)
            elif data.get("method") == "Runtime.consoleAPICalled":
                args = data["params"].get("args", [])
                self.console.append(" ".join(str(a.get("value", a.get("description", "")))
                                             for a in args))
            elif data.get("method") == "Runtime.exceptionThrown":
                details = data["params"]["exceptionDetails"]
                self.console.append("uncaught: " + str(details.get("exception", {}).get(
                    "description", details.get("text"))))
        for future in self._answers.values():
            if not future.done():
                future.set_exception(ConnectionError("the DevTools socket closed"))

    async def call(self, method: str, **params: Any) -> dict:
        assert self._ws is not None
        ident = next(self._ids)
        answer = asyncio.get_running_loop().create_future()
        self._answers[ident] = answer
        await self._ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        result = await asyncio.wait_for(answer, CALL_TIMEOUT_S)
        if "error" in result:
            raise RuntimeError(f"{method}: {result['error']}")
        return result.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        """The expression's value in the page (a promise is awaited)."""
        result = await self.call("Runtime.evaluate", expression=expression, awaitPromise=True,
                                 returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, condition: str, timeout: float, what: str) -> Any:
        """Evaluate `condition` until it is truthy; AssertionError naming `what` if it never
        is (with the page's report, to say where it stood)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = await self.evaluate(condition)
            if value:
                return value
            await asyncio.sleep(0.2)
        report = await self.evaluate("JSON.stringify(window.report)")
        raise AssertionError(f"the page never got to: {what}\nreport: {report}\n"
                             f"console: {self.console[-10:]}")

    async def stop(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
        if self._session is not None:
            await self._session.close()
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self._profile, ignore_errors=True)
