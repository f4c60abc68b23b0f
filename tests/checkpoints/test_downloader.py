"""The checkpoint downloader, run with the real huggingface_hub client against a local stand-in.

`HubStandIn` serves a folder of small files on 127.0.0.1 the way the Hugging Face Hub does
for what huggingface_hub 0.36 calls (read from its source): `HEAD`/`GET
/{repo}/resolve/{rev}/{path}` (small files straight away with their git-blob ETag; LFS files
by a 302 to a blob URL, with X-Linked-Etag = sha256 and X-Linked-Size), Range requests on
the blob URL, `GET /api/models/{repo}[/revision/{rev}]` and `POST
/api/models/{repo}/paths-info/{rev}`, and a 401/403 with `X-Error-Code: GatedRepo` for a
gated repository. Nothing here reaches any other host.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.pop("HF_HUB_OFFLINE", None)

import pytest
from huggingface_hub import constants

from app.asr.stt_catalog import parse_stt_manifest
from app.checkpoints import downloader as downloader_module
from app.checkpoints.catalog import Manifest, parse_manifest
from app.checkpoints.downloader import (
    CheckpointDownloader,
    DownloadCancelled,
    GatedRepoAccessError,
    HubUnreachableError,
    IntegrityError,
    NotEnoughSpaceError,
    RemoteFile,
    remote_files,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LFS_SUFFIXES = (".safetensors", ".model", ".tgz", ".bin")
TEST_CHUNK = 64 * 1024  # huggingface_hub reads 10 MB per chunk; small files need smaller ones
HOLD_LIMIT_S = 600.0  # the longest a Fault(hold_after=...) holds a request unreleased


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass
class _Repo:
    folder: Path
    gated: bool = False
    tokens: frozenset[str] = frozenset()


@dataclass
class Fault:
    """What to do to the next GET of one file's bytes."""

    drop_after: int | None = None  # send this many bytes, then close the connection
    corrupt: bool = False  # serve different bytes of the same length (every time)
    hold_after: int | None = None  # send this many bytes, then wait for `release`
    release: threading.Event = field(default_factory=threading.Event)
    held: threading.Event = field(default_factory=threading.Event)  # set once it waits


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    range: str | None
    authorization: str | None
    bytes_sent: int


class HubStandIn:
    """A Hugging Face Hub stand-in on 127.0.0.1 serving repositories from local folders."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.repos: dict[str, _Repo] = {}
        self.faults: dict[tuple[str, str], Fault] = {}
        self.seen: list[Seen] = []
        # Requests being answered: each is recorded once answered, which can be after the
        # client has what it asked for (a busy machine runs the client first); what the
        # test reads waits for them. A request a fault holds is not waited for until its
        # fault is released.
        self._answering = 0
        self._parked: list[Fault] = []
        self._lock = threading.Condition()
        self._server = _Server(self)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> HubStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        for fault in self.faults.values():
            fault.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def publish(
        self, repo: str, files: dict[str, bytes], *, gated: bool = False, tokens: tuple = ()
    ) -> Path:
        folder = self.root / repo
        for name, data in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
        self.repos[repo] = _Repo(folder, gated, frozenset(tokens))
        return folder

    def answering(self) -> None:
        """A request is being answered (`record` ends it)."""
        with self._lock:
            self._answering += 1

    def parked(self, fault: Fault, waiting: bool) -> None:
        """A request waits for `fault`'s release (True), or goes on (False)."""
        with self._lock:
            if waiting:
                self._parked.append(fault)
            else:
                self._parked.remove(fault)
            self._lock.notify_all()

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)
            self._answering -= 1
            self._lock.notify_all()

    def _answered(self) -> None:
        """Under the lock: every request that is not held has been recorded (a generous
        bound: a request it still waits for then simply shows as not seen)."""
        self._lock.wait_for(lambda: self._answering <= len(self._parked) and not any(
            fault.release.is_set() for fault in self._parked), timeout=60)

    def gets(self, path_part: str) -> list[Seen]:
        with self._lock:
            self._answered()
            return [s for s in self.seen if s.method == "GET" and path_part in s.path]

    def forget_seen(self) -> None:
        """Start counting afresh: what came so far (and is still being answered) is
        forgotten."""
        with self._lock:
            self._answered()
            self.seen.clear()

    # -- what the hub knows about a file ---------------------------------------------------

    def entry(self, repo: str, name: str) -> dict[str, Any] | None:
        path = self.repos[repo].folder / name
        if not path.is_file():
            return None
        data = path.read_bytes()
        entry: dict[str, Any] = {
            "type": "file",
            "path": name,
            "size": len(data),
            "oid": git_blob_sha1(data),
        }
        if name.endswith(LFS_SUFFIXES):
            entry["lfs"] = {
                "oid": hashlib.sha256(data).hexdigest(),
                "size": len(data),
                "pointerSize": 134,
            }
        return entry


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, hub: HubStandIn) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hub = hub

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-file (cancel) is normal here."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"
    timeout = 10.0

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    @property
    def hub(self) -> HubStandIn:
        return self.server.hub

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        sent = 0
        self.hub.answering()
        try:
            if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/paths-info/([^/]+)", path):
                self._paths_info(m.group(1))
            elif m := re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path):
                self._model_info(m.group(1), "blobs" in parse_qs(url.query))
            elif m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
                self._resolve(method, m.group(1), m.group(3))
            elif m := re.fullmatch(r"/blobs/([^/]+/[^/]+)/(.+)", path):
                sent = self._blob(method, m.group(1), m.group(2))
            else:
                self._error(404, "NotFound", "no such endpoint")
        finally:
            self.hub.record(
                Seen(method, path, self.headers.get("Range"), self.headers.get("Authorization"),
                     sent)
            )

    # -- replies ---------------------------------------------------------------------------

    def _error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _repo(self, repo_id: str) -> _Repo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
        return repo

    def _model_info(self, repo_id: str, blobs: bool) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        siblings = []
        for path in sorted(p for p in repo.folder.rglob("*") if p.is_file()):
            name = path.relative_to(repo.folder).as_posix()
            sibling: dict[str, Any] = {"rfilename": name}
            if blobs:
                entry = self.hub.entry(repo_id, name) or {}
                sibling.update(size=entry["size"], blobId=entry["oid"])
                if "lfs" in entry:
                    lfs = entry["lfs"]
                    sibling["lfs"] = {"sha256": lfs["oid"], "size": lfs["size"],
                                      "pointerSize": lfs["pointerSize"]}
            siblings.append(sibling)
        self._json({"_id": repo_id, "id": repo_id, "sha": COMMIT, "private": False,
                    "gated": "manual" if repo.gated else False, "disabled": False,
                    "siblings": siblings})

    def _paths_info(self, repo_id: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode())
        repo = self._repo(repo_id)
        if repo is None:
            return
        entries = [self.hub.entry(repo_id, p) for p in form.get("paths", [])]
        self._json([e for e in entries if e is not None])

    def _authorised(self, repo: _Repo, repo_id: str) -> bool:
        if not repo.gated:
            return True
        auth = self.headers.get("Authorization") or ""
        token = auth.removeprefix("Bearer ").strip()
        if token in repo.tokens:
            return True
        status = 403 if token else 401
        self._error(status, "GatedRepo", f"Access to model {repo_id} is restricted.")
        return False

    def _resolve(self, method: str, repo_id: str, name: str) -> None:
        repo = self._repo(repo_id)
        if repo is None or not self._authorised(repo, repo_id):
            return
        entry = self.hub.entry(repo_id, name)
        if entry is None:
            self._error(404, "EntryNotFound", f"{name} does not exist")
            return
        if "lfs" in entry:
            # As the hub: a redirect to the blob, with the LFS file's sha256 and size.
            host = self.headers.get("Host")
            self.send_response(302)
            self.send_header("Location", f"http://{host}/blobs/{repo_id}/{name}")
            self.send_header("ETag", f'"{entry["oid"]}"')
            self.send_header("X-Linked-Etag", f'"{entry["lfs"]["oid"]}"')
            self.send_header("X-Linked-Size", str(entry["size"]))
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = (repo.folder / name).read_bytes()
        self.send_response(200)
        self.send_header("ETag", f'"{entry["oid"]}"')
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if method == "GET":
            self.wfile.write(data)

    def _blob(self, method: str, repo_id: str, name: str) -> int:
        repo = self._repo(repo_id)
        if repo is None or not (repo.folder / name).is_file():
            self._error(404, "EntryNotFound", f"{name} does not exist")
            return 0
        data = (repo.folder / name).read_bytes()
        fault = self.hub.faults.get((repo_id, name))
        if fault is not None and fault.corrupt:
            data = bytes(b ^ 0xFF for b in data[:16]) + data[16:]
        start = 0
        if m := re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or ""):
            start = int(m.group(1))
        body = data[start:]
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if method != "GET":
            return 0
        if fault is not None and method == "GET" and fault.drop_after is not None:
            cut, fault.drop_after = fault.drop_after, None
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return cut
        if fault is not None and fault.hold_after is not None:
            cut, fault.hold_after = fault.hold_after, None
            self.wfile.write(body[:cut])
            self.wfile.flush()
            fault.held.set()
            self.hub.parked(fault, True)  # the test reads what was seen while this waits
            try:
                # Held until the test says so (it, or the hub's exit, always does): a bound
                # the test's own steps reach would let a busy machine finish the download
                # before the test's Ctrl-C or cancel has landed. The bound only ends a
                # request a broken test forgot.
                fault.release.wait(timeout=HOLD_LIMIT_S)
            finally:
                self.hub.parked(fault, False)
            self.wfile.write(body[cut:])
            return len(body)
        self.wfile.write(body)
        return len(body)


# ---- fixtures -----------------------------------------------------------------------------


def make_files(big_size: int = 1_000_000) -> dict[str, bytes]:
    """A checkpoint-shaped repository: two LFS weight files, an LFS tokenizer, a config."""
    rng = __import__("random").Random(7)
    return {
        "model.safetensors": rng.randbytes(big_size),
        "mimi.safetensors": rng.randbytes(200_000),
        "tokenizer.model": rng.randbytes(30_000),
        "config.json": b'{"moshi_name": "model.safetensors"}\n',
    }


def make_manifest(repo: str, files: dict[str, bytes], *, gated: bool = False) -> Manifest:
    roles = {"moshi": "model.safetensors", "mimi": "mimi.safetensors",
             "tokenizer": "tokenizer.model", "config": "config.json"}
    assert set(roles.values()) == set(files)
    return parse_manifest({
        "id": repo.replace("/", "-"),
        "display_name": f"Test model {repo}",
        "licence": "Test Licence 1.0" if gated else "MIT",
        "source": {"kind": "huggingface", "repo": repo, "files": roles, "gated": gated},
    })


def isolate_hub_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Private HF_HOME, no telemetry, never offline, no token from the environment, and
    small chunks so that small files stream in several pieces."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", TEST_CHUNK)
    real_getaddrinfo = socket.getaddrinfo

    def loopback_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("127.0.0.1", "localhost"):
            raise socket.gaierror(f"test guard: no network except 127.0.0.1 (asked for {host})")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)


@pytest.fixture(autouse=True)
def hub_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate_hub_environment(tmp_path, monkeypatch)


@pytest.fixture()
def hub(tmp_path: Path) -> Iterator[HubStandIn]:
    with HubStandIn(tmp_path / "hub") as server:
        yield server


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# ---- tests --------------------------------------------------------------------------------


def test_plan_reports_the_total_size_and_hashes_up_front(hub: HubStandIn, tmp_path: Path):
    files = make_files()
    hub.publish("test/model", files)
    dl = CheckpointDownloader.for_manifest(make_manifest("test/model", files),
                                           tmp_path / "ckpt", endpoint=hub.url)
    plan = dl.plan()
    assert plan.total_bytes == sum(len(d) for d in files.values())
    assert plan.bytes_to_fetch == plan.total_bytes
    by_name = {f.name: f for f in plan.files}
    weights = by_name["model.safetensors"]
    assert weights.sha256 == hashlib.sha256(files["model.safetensors"]).hexdigest()
    assert weights.commit == COMMIT
    assert by_name["config.json"].sha256 is None  # a small file: git blob hash only
    assert not hub.gets("/blobs/")  # planning fetched no file content


def test_download_lands_every_file_with_progress_up_to_the_total(hub: HubStandIn, tmp_path):
    files = make_files()
    hub.publish("test/model", files)
    folder = tmp_path / "ckpt"
    dl = CheckpointDownloader.for_manifest(make_manifest("test/model", files), folder,
                                           endpoint=hub.url)
    progress: list[tuple[int, int, str]] = []
    stages: list[tuple[str, str]] = []
    result = dl.download(on_progress=lambda d, t, n: progress.append((d, t, n)),
                         on_stage=lambda s, n: stages.append((s, n)))
    for name, data in files.items():
        assert (folder / name).read_bytes() == data
    total = sum(len(d) for d in files.values())
    done = [d for d, _, _ in progress]
    assert done == sorted(done), "progress never goes back"
    assert done[-1] == total and {t for _, t, _ in progress} == {total}
    assert len(progress) > 1_000_000 // TEST_CHUNK, "progress is reported while a file streams"
    assert set(result.verified) == set(files)
    assert result.fetched_bytes == total
    assert ("verifying", "model.safetensors") in stages

    # A second run finds everything on disk: nothing is fetched again.
    hub.forget_seen()
    again = dl.download()
    assert again.fetched_bytes == 0
    assert not hub.gets("/blobs/") and not hub.gets("/resolve/")


def test_cancel_keeps_the_partial_file_and_the_next_run_resumes_with_a_range(
    hub: HubStandIn, tmp_path: Path
):
    files = make_files()
    hub.publish("test/model", files)
    folder = tmp_path / "ckpt"
    dl = CheckpointDownloader.for_manifest(make_manifest("test/model", files), folder,
                                           endpoint=hub.url)
    cancel = threading.Event()

    def on_progress(done: int, total: int, name: str) -> None:
        if name == "model.safetensors" and done >= 300_000:
            cancel.set()

    with pytest.raises(DownloadCancelled, match="kept on disk"):
        dl.download(cancel=cancel, on_progress=on_progress)
    assert not (folder / "model.safetensors").exists()
    plan = dl.plan()
    partial = {f.name: f.on_disk for f in plan.files}["model.safetensors"]
    assert 0 < partial < len(files["model.safetensors"])

    hub.forget_seen()
    dl.download()
    assert (folder / "model.safetensors").read_bytes() == files["model.safetensors"]
    resumed = hub.gets("/blobs/test/model/model.safetensors")
    assert [s.range for s in resumed] == [f"bytes={partial}-"]
    assert resumed[0].bytes_sent == len(files["model.safetensors"]) - partial


def test_a_dropped_connection_is_resumed_not_restarted(hub: HubStandIn, tmp_path: Path):
    files = make_files()
    hub.publish("test/model", files)
    hub.faults[("test/model", "model.safetensors")] = Fault(drop_after=5 * TEST_CHUNK + 100)
    folder = tmp_path / "ckpt"
    dl = CheckpointDownloader.for_manifest(make_manifest("test/model", files), folder,
                                           endpoint=hub.url)
    try:
        dl.download()  # huggingface_hub may resume by itself within the same call
    except HubUnreachableError as exc:
        assert "resumes where it stopped" in str(exc)
        dl.download()
    assert (folder / "model.safetensors").read_bytes() == files["model.safetensors"]
    gets = hub.gets("/blobs/test/model/model.safetensors")
    assert gets[0].range is None and gets[0].bytes_sent == 5 * TEST_CHUNK + 100
    assert gets[1].range == f"bytes={5 * TEST_CHUNK}-", "whole chunks received are kept"
    assert sum(s.bytes_sent for s in gets) < 2 * len(files["model.safetensors"])


def test_a_corrupt_file_is_deleted_and_reported(hub: HubStandIn, tmp_path: Path):
    files = make_files()
    hub.publish("test/model", files)
    hub.faults[("test/model", "mimi.safetensors")] = Fault(corrupt=True)
    folder = tmp_path / "ckpt"
    dl = CheckpointDownloader.for_manifest(make_manifest("test/model", files), folder,
                                           endpoint=hub.url)
    with pytest.raises(IntegrityError, match="mimi.safetensors is corrupt") as caught:
        dl.download()
    assert caught.value.expected == hashlib.sha256(files["mimi.safetensors"]).hexdigest()
    assert not (folder / "mimi.safetensors").exists()

    del hub.faults[("test/model", "mimi.safetensors")]  # the hub serves it right again
    dl.download()
    assert (folder / "mimi.safetensors").read_bytes() == files["mimi.safetensors"]


def test_a_gated_repo_explains_the_licence_and_token_step(hub: HubStandIn, tmp_path: Path):
    files = make_files(50_000)
    hub.publish("org/gated", files, gated=True, tokens=("hf_good",))
    manifest = make_manifest("org/gated", files, gated=True)
    folder = tmp_path / "ckpt"

    no_token = CheckpointDownloader.for_manifest(manifest, folder, endpoint=hub.url)
    assert no_token.plan().gated_repos == ("org/gated",)
    with pytest.raises(GatedRepoAccessError) as caught:
        no_token.download()
    message = str(caught.value)
    assert "licence (Test Licence 1.0) must be accepted" in message
    assert f"{hub.url}/org/gated" in message and "HF_TOKEN" in message
    assert "settings/tokens" in message

    not_accepted = CheckpointDownloader.for_manifest(manifest, folder, endpoint=hub.url,
                                                     token="hf_other")
    with pytest.raises(GatedRepoAccessError, match="has not accepted the licence"):
        not_accepted.download()

    accepted = CheckpointDownloader.for_manifest(manifest, folder, endpoint=hub.url,
                                                 token="hf_good")
    accepted.download()
    assert (folder / "model.safetensors").read_bytes() == files["model.safetensors"]
    assert all(s.authorization == "Bearer hf_good" for s in hub.gets("/resolve/"))


def test_the_token_can_come_from_hf_token(hub, tmp_path, monkeypatch):
    files = make_files(10_000)
    hub.publish("org/gated", files, gated=True, tokens=("hf_env",))
    monkeypatch.setenv("HF_TOKEN", "hf_env")
    dl = CheckpointDownloader.for_manifest(make_manifest("org/gated", files, gated=True),
                                           tmp_path / "ckpt", endpoint=hub.url)
    dl.download()
    assert (tmp_path / "ckpt" / "config.json").read_bytes() == files["config.json"]


def test_an_unreachable_hub_gives_a_clear_error(tmp_path: Path):
    files = make_files(10_000)
    dl = CheckpointDownloader.for_manifest(make_manifest("test/model", files), tmp_path / "c",
                                           endpoint=closed_port_url())
    with pytest.raises(HubUnreachableError, match="Could not reach http://127.0.0.1:"):
        dl.download()


def test_not_enough_disk_space_stops_before_fetching(hub, tmp_path, monkeypatch):
    files = make_files()
    hub.publish("test/model", files)
    real = downloader_module.shutil.disk_usage

    def tiny_disk(path: Any) -> Any:
        return real(path)._replace(free=1_000)

    monkeypatch.setattr(downloader_module.shutil, "disk_usage", tiny_disk)
    dl = CheckpointDownloader.for_manifest(make_manifest("test/model", files), tmp_path / "c",
                                           endpoint=hub.url)
    with pytest.raises(NotEnoughSpaceError, match="not enough disk space") as caught:
        dl.download()
    assert caught.value.needed == sum(len(d) for d in files.values())
    assert not hub.gets("/resolve/")


def test_the_stt_takes_its_end_of_speech_heads_from_a_second_repo(hub, tmp_path):
    main = {"config.json": b"{}\n", "model.safetensors": b"w" * 5000,
            "mimi.safetensors": b"m" * 3000, "tok.model": b"t" * 100}
    hub.publish("kyutai-test/stt", main)
    hub.publish("kyutai-test/stt-candle", {"model.safetensors": b"h" * 7000})
    stt = parse_stt_manifest({
        "id": "stt-test", "display_name": "STT test",
        "source": {"kind": "huggingface", "repo": "kyutai-test/stt",
                   "files": {"config": "config.json", "moshi": "model.safetensors",
                             "mimi": "mimi.safetensors", "tokenizer": "tok.model"}},
        "end_of_speech": {"weights_repo": "kyutai-test/stt-candle",
                          "weights_repo_file": "model.safetensors",
                          "weights_file": "end-of-speech/model.safetensors"},
    })
    extra = remote_files(stt)[-1]
    assert extra == RemoteFile("kyutai-test/stt-candle", "model.safetensors",
                               "end-of-speech/model.safetensors", optional=True)
    folder = tmp_path / "stt"
    result = CheckpointDownloader.for_manifest(stt, folder, endpoint=hub.url).download()
    assert (folder / "end-of-speech" / "model.safetensors").read_bytes() == b"h" * 7000
    assert (folder / "model.safetensors").read_bytes() == b"w" * 5000
    assert "end-of-speech/model.safetensors" in result.verified

    # Without the second repository the STT still downloads (it falls back to its VAD).
    del hub.repos["kyutai-test/stt-candle"]
    plan = CheckpointDownloader.for_manifest(stt, tmp_path / "stt2", endpoint=hub.url).plan()
    assert plan.skipped == ("end-of-speech/model.safetensors",)


def test_the_catalog_entries_map_to_their_hub_files():
    from app.asr.stt_catalog import get_stt_manifest
    from app.checkpoints.catalog import get_manifest

    persona = remote_files(get_manifest("personaplex"))
    assert {f.path for f in persona} >= {"model.safetensors", "voices.tgz"}
    assert {f.repo for f in persona} == {"nvidia/personaplex-7b-v1"}
    stt = remote_files(get_stt_manifest("kyutai-stt-1b-en_fr"))
    assert stt[-1].repo == "kyutai/stt-1b-en_fr-candle" and stt[-1].optional
    # The Context Spanning release: its weights and voices from its own repository, Mimi
    # and the tokenizer from PersonaPlex's, each into the one checkpoint folder.
    release = {f.path: f.repo for f in remote_files(get_manifest("context-spanning-7b"))}
    assert release["context_spanning_7b.pt"] == "mindlogicinc/context-spanning-7b"
    assert release["voices/f0.pt"] == "mindlogicinc/context-spanning-7b"
    assert release["tokenizer-e351c8d8-checkpoint125.safetensors"] == "nvidia/personaplex-7b-v1"
    assert release["tokenizer_spm_32k_3.model"] == "nvidia/personaplex-7b-v1"
    assert len(release) == 12
    with pytest.raises(ValueError, match="must end with"):
        RemoteFile("a/b", "model.safetensors", "heads.safetensors")
