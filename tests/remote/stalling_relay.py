"""A TCP relay between a client and `serve` that stalls all traffic, both ways at once, as a
Wi-Fi or mobile link does for seconds (this kernel has no netem): during a stall it neither
reads nor writes, so what either side sends waits in the sockets' buffers (and TCP's flow
control), then flows on. Nothing is dropped and no connection is closed.

A stall starts when told (`stall`), or when the bytes the server sent through the relay
reach a threshold (`after_bytes`: a conversation at a given point, whatever this machine's
speed). The relay runs on its own thread and event loop, so a client in another process or
in this one's own loop can use it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time


class StallingRelay:
    def __init__(self, target_port: int,
                 after_bytes: tuple[tuple[int, float], ...] = ()) -> None:
        """`after_bytes`: (bytes from the server, seconds) pairs: each stall starts once
        that many bytes came from the server and the stall before it has ended."""
        self.target_port = target_port
        self.port = 0
        self.down_bytes = 0  # from the server to the client, all connections
        self.stalls_done: list[float] = []  # seconds each stall that ended held traffic
        self.down_bytes_after_stalls = 0  # from the server once every planned stall ended
        self._planned = list(after_bytes)
        self._flowing: asyncio.Event | None = None
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stalling-relay", daemon=True)

    def start(self) -> StallingRelay:
        self._thread.start()
        assert self._started.wait(10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def stalled(self) -> bool:
        flowing = self._flowing
        return flowing is not None and not flowing.is_set()

    def stall(self, seconds: float) -> None:
        """Hold all traffic for `seconds`, from now (any thread)."""
        self._loop.call_soon_threadsafe(self._begin, seconds)

    def _begin(self, seconds: float) -> None:
        assert self._flowing is not None
        if not self._flowing.is_set():
            return  # one stall at a time
        self._flowing.clear()
        started = time.monotonic()

        def end() -> None:
            assert self._flowing is not None
            self.stalls_done.append(time.monotonic() - started)
            self._flowing.set()

        self._loop.call_later(seconds, end)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._flowing = asyncio.Event()
        self._flowing.set()
        server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            with contextlib.suppress(BaseException):
                self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer, down=False),
                             self._pipe(up_reader, writer, down=True),
                             return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    down: bool) -> None:
        flowing = self._flowing
        assert flowing is not None
        try:
            while True:
                await flowing.wait()
                data = await reader.read(65536)
                if not data:
                    break
                await flowing.wait()  # a chunk read as a stall began waits for its end
                writer.write(data)
                await writer.drain()
                if down:
                    self._count_down(len(data))
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def _count_down(self, size: int) -> None:
        self.down_bytes += size
        done = len(self.stalls_done)
        if self._planned and done == len(self._planned):
            self.down_bytes_after_stalls += size
        elif done < len(self._planned) and not self.stalled:
            threshold, seconds = self._planned[done]
            if self.down_bytes >= threshold:
                self._begin(seconds)
