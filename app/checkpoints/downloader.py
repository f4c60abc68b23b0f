"""Download a catalog checkpoint from the Hugging Face Hub, on first use, into its folder.

Why one `hf_hub_download(local_dir=...)` per file rather than `snapshot_download`:
- the catalog names the files a checkpoint needs, and the real STT needs one more from a
  second repository (its end-of-speech heads) under another local name; per-file calls fit
  both, where `allow_patterns` is per repository;
- `snapshot_download` fetches files on a pool of threads, which makes a cancel, a byte count
  and the sha256 check per file harder to follow; one file at a time on one worker thread
  keeps all three simple, and the bandwidth is the same for a few big files;
- huggingface_hub still does the transfer: its HEAD/redirect/ETag handling, the `.incomplete`
  file it resumes with a Range request, and its `.cache/huggingface` metadata that makes a
  finished file a no-op the next time.

Before anything is fetched, `plan()` asks the hub (the repository's commit, then the files'
sizes and LFS sha256 in one paths-info call) so the size is known up front, the revision is
pinned for every file, and the disk space is checked. After each file lands it is hashed
against the hub's metadata (sha256 for LFS files, the git blob sha1 for small ones).

Progress and cancel: huggingface_hub 0.36 has no per-byte callback for one file, only its
tqdm bar. `_route_progress_bars()` wraps the function that makes that bar, once per process,
so that a bar made on a thread that is downloading for us also reports to that download
(the route is thread-local, other callers see no change). Each report may raise
`DownloadCancelled`, which stops the transfer at the next chunk of at most
`huggingface_hub.constants.DOWNLOAD_CHUNK_SIZE` (10 MB) and leaves the `.incomplete` file for
huggingface_hub to resume. If a future huggingface_hub drops that function, downloads still
work: progress is then reported per file and a cancel waits for the file in flight.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

import requests
from huggingface_hub import HfApi, file_download, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile


class DownloadableManifest(Protocol):
    """What a download needs from a catalog entry: the speech models' (checkpoints/catalog.py)
    and the speech recognizers' (asr/stt_catalog.py) both have it. Optional parts are read
    with getattr: `file_repos` (role -> another repository) and `end_of_speech`."""

    @property
    def id(self) -> str: ...
    @property
    def hf_repo(self) -> str | None: ...
    @property
    def hf_revision(self) -> str | None: ...
    @property
    def files(self) -> Mapping[str, str]: ...
    @property
    def licence(self) -> str: ...

    def default_folder(self) -> Path: ...

ProgressCallback = Callable[[int, int, str], None]  # (done_bytes, total_bytes, file_name)
StageCallback = Callable[[str, str], None]  # (stage, file_name): planning/downloading/verifying

DEFAULT_HUB = "https://huggingface.co"
TOKEN_SETTINGS_URL = "https://huggingface.co/settings/tokens"
SPACE_MARGIN_BYTES = 100 * 1000 * 1000  # left free after a download, for the OS and moshi
_HASH_BLOCK = 8 * 1024 * 1024
_METADATA_DIR = Path(".cache") / "huggingface" / "download"  # huggingface_hub's local_dir layout


# ---- errors: each message is written for the person in front of the app -----------------


class DownloadError(RuntimeError):
    """A download could not be done; `str(error)` says why and what to do."""


class HubUnreachableError(DownloadError):
    """The hub could not be reached, or the connection dropped (partial files are kept)."""


class GatedRepoAccessError(DownloadError):
    """The repository is gated: its licence must be accepted and a token provided."""

    def __init__(self, message: str, repo: str, model_url: str, token_sent: bool) -> None:
        super().__init__(message)
        self.repo = repo
        self.model_url = model_url
        self.token_sent = token_sent


class IntegrityError(DownloadError):
    """A downloaded file does not match the hub's hash; it has been deleted."""

    def __init__(self, message: str, file_name: str, expected: str, actual: str) -> None:
        super().__init__(message)
        self.file_name = file_name
        self.expected = expected
        self.actual = actual


class NotEnoughSpaceError(DownloadError):
    """The disk cannot hold what is left to download."""

    def __init__(self, message: str, needed: int, free: int) -> None:
        super().__init__(message)
        self.needed = needed
        self.free = free


class DownloadCancelled(DownloadError):
    """The user cancelled; what was fetched stays on disk and the next run resumes it."""


# ---- what to fetch ------------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteFile:
    """One file of a checkpoint: where it is on the hub and where it goes in the folder."""

    repo: str
    path: str  # inside the repository
    local_name: str  # inside the checkpoint folder; must end with `path`
    revision: str | None = None  # None: the repository's default branch
    optional: bool = False  # skipped (not an error) when the hub does not have it

    def __post_init__(self) -> None:
        local, remote = PurePosixPath(self.local_name), PurePosixPath(self.path)
        if local.parts[-len(remote.parts):] != remote.parts:
            raise ValueError(f"local name {self.local_name!r} must end with {self.path!r}")

    def local_dir(self, folder: Path) -> Path:
        """The `local_dir` for hf_hub_download, so the file lands at folder/local_name."""
        prefix = PurePosixPath(self.local_name).parts[: -len(PurePosixPath(self.path).parts)]
        return folder.joinpath(*prefix)


@dataclass(frozen=True)
class PlannedFile:
    """A file as the hub describes it at a pinned commit, and how much of it is on disk."""

    remote: RemoteFile
    commit: str
    size: int
    sha256: str | None  # LFS files only
    blob_id: str  # git blob sha1; huggingface_hub's ETag for non-LFS files
    on_disk: int  # bytes already here: `size` when complete, else the partial file's size

    @property
    def name(self) -> str:
        return self.remote.local_name

    @property
    def complete(self) -> bool:
        return self.on_disk >= self.size

    @property
    def etag(self) -> str:
        return self.sha256 or self.blob_id


@dataclass(frozen=True)
class DownloadPlan:
    folder: Path
    files: tuple[PlannedFile, ...]
    gated_repos: tuple[str, ...]
    skipped: tuple[str, ...]  # optional files the hub does not have

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def bytes_on_disk(self) -> int:
        return sum(min(f.on_disk, f.size) for f in self.files)

    @property
    def bytes_to_fetch(self) -> int:
        return self.total_bytes - self.bytes_on_disk


@dataclass(frozen=True)
class DownloadResult:
    folder: Path
    files: tuple[Path, ...]
    verified: tuple[str, ...]  # local names whose hash matched the hub's
    fetched_bytes: int  # bytes that came over the network in this run
    skipped: tuple[str, ...]


def remote_files(manifest: DownloadableManifest) -> list[RemoteFile]:
    """The files a catalog entry needs, including a second repository's (the STT's
    end-of-speech heads), which is optional: the STT falls back to its VAD without it."""
    if not manifest.hf_repo:
        raise DownloadError(f"model {manifest.id!r} is not on Hugging Face; nothing to download")
    # A file may live in another repository (the Context Spanning release takes Mimi and
    # the tokenizer from PersonaPlex's); the pinned revision is the main repository's.
    other_repos = getattr(manifest, "file_repos", {})
    files, seen = [], set()
    for role, name in manifest.files.items():
        if name in seen:
            continue
        seen.add(name)
        repo = other_repos.get(role)
        files.append(RemoteFile(repo or manifest.hf_repo, name, name,
                                None if repo else manifest.hf_revision))
    eos = getattr(manifest, "end_of_speech", None)
    if eos is not None and eos.weights_repo and eos.weights_repo_file and eos.weights_file:
        files.append(
            RemoteFile(eos.weights_repo, eos.weights_repo_file, eos.weights_file, optional=True)
        )
    return files


def format_bytes(n: float) -> str:
    """Decimal units, as the hub's own pages show sizes."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


# ---- progress routing (see the module docstring) ------------------------------------------


class _FileMeter:
    """Turns huggingface_hub's progress-bar updates for one file into our callback."""

    def __init__(
        self,
        planned: PlannedFile,
        base: int,
        total: int,
        on_progress: ProgressCallback | None,
        cancel: threading.Event,
    ) -> None:
        self.planned = planned
        self.base = base
        self.total = total
        self.on_progress = on_progress
        self.cancel = cancel
        self.in_file = 0
        self.fetched = 0  # bytes received over the network for this file

    def start(self, initial: int, can_cancel: bool) -> None:
        self.in_file = initial
        self._report(can_cancel)

    def advance(self, n: int, can_cancel: bool) -> None:
        self.in_file += n
        self.fetched += n
        self._report(can_cancel)

    def _report(self, can_cancel: bool) -> None:
        if self.on_progress is not None:
            done = self.base + min(self.in_file, self.planned.size)
            self.on_progress(done, self.total, self.planned.name)
        if can_cancel and self.cancel.is_set():
            raise DownloadCancelled("download cancelled")


class _Route(threading.local):
    meter: _FileMeter | None = None


_ROUTE = _Route()
_HOOK_LOCK = threading.Lock()
_HOOK_MARK = "_contextspan_routed"


class _ReportingBar:
    """Stands in for huggingface_hub's tqdm bar: forwards to it and to a `_FileMeter`."""

    def __init__(self, bar_context: Any, meter: _FileMeter, initial: int, can_cancel: bool):
        self._bar_context = bar_context
        self._meter = meter
        self._initial = initial
        self._can_cancel = can_cancel
        self._bar: Any = None

    def __enter__(self) -> _ReportingBar:
        self._bar = self._bar_context.__enter__()
        try:
            self._meter.start(self._initial, self._can_cancel)
        except BaseException as exc:
            self._bar_context.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __exit__(self, *exc_info: Any) -> Any:
        return self._bar_context.__exit__(*exc_info)

    def update(self, n: float = 1) -> None:
        self._bar.update(n)
        self._meter.advance(int(n), self._can_cancel)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bar, name)


def _route_progress_bars() -> bool:
    """Wrap huggingface_hub's progress-bar factory once; False if this version has none."""
    with _HOOK_LOCK:
        original = getattr(file_download, "_get_progress_bar_context", None)
        if original is None:
            return False
        if getattr(original, _HOOK_MARK, False):
            return True

        def routed(*args: Any, **kwargs: Any) -> Any:
            bar_context = original(*args, **kwargs)
            meter = _ROUTE.meter
            if meter is None:
                return bar_context
            # hf_xet calls back from its own threads: never raise into it; a cancel then
            # waits for the file in flight (see the module docstring).
            can_cancel = kwargs.get("name") != "huggingface_hub.xet_get"
            return _ReportingBar(bar_context, meter, int(kwargs.get("initial") or 0), can_cancel)

        setattr(routed, _HOOK_MARK, True)
        file_download._get_progress_bar_context = routed
        return True


# ---- the downloader -----------------------------------------------------------------------


class CheckpointDownloader:
    """Plans and runs the download of one checkpoint's files into one folder.

    Blocking: run it on a worker thread. `endpoint` replaces https://huggingface.co (tests
    point it at a local stand-in); `token` is the user's Hugging Face token, else HF_TOKEN,
    else whatever `huggingface-cli login` stored.
    """

    def __init__(
        self,
        files: Sequence[RemoteFile],
        folder: Path,
        *,
        endpoint: str | None = None,
        token: str | None = None,
        licence: str = "",
    ) -> None:
        if not files:
            raise ValueError("nothing to download")
        self.files = tuple(files)
        self.folder = Path(folder)
        self.endpoint = endpoint.rstrip("/") if endpoint else None
        self.token = token or os.environ.get("HF_TOKEN") or None
        self.licence = licence
        self._api = HfApi(endpoint=self.endpoint, token=self.token, library_name="contextspan")

    @classmethod
    def for_manifest(
        cls,
        manifest: DownloadableManifest,
        folder: Path | None = None,
        *,
        endpoint: str | None = None,
        token: str | None = None,
    ) -> CheckpointDownloader:
        return cls(
            remote_files(manifest),
            Path(folder) if folder is not None else manifest.default_folder(),
            endpoint=endpoint,
            token=token,
            licence=manifest.licence,
        )

    @property
    def hub_url(self) -> str:
        return self.endpoint or DEFAULT_HUB

    # -- planning ---------------------------------------------------------------------------

    def plan(self) -> DownloadPlan:
        """Ask the hub for the commit, sizes and hashes; look at what is already on disk."""
        planned: list[PlannedFile] = []
        gated: list[str] = []
        skipped: list[str] = []
        groups: dict[tuple[str, str | None], list[RemoteFile]] = {}
        for remote in self.files:
            groups.setdefault((remote.repo, remote.revision), []).append(remote)
        for (repo, revision), remotes in groups.items():
            try:
                info = self._api.model_info(repo, revision=revision)
                commit = info.sha or revision or "main"
                if info.gated:
                    gated.append(repo)
                entries = self._api.get_paths_info(repo, [r.path for r in remotes], revision=commit)
            except Exception as exc:
                if all(r.optional for r in remotes) and _is_absent(exc):
                    skipped.extend(r.local_name for r in remotes)
                    continue
                raise self._explain(exc, repo, remotes[0].path) from exc
            by_path = {e.path: e for e in entries if isinstance(e, RepoFile)}  # not folders
            for remote in remotes:
                entry = by_path.get(remote.path)
                if entry is None:
                    if remote.optional:
                        skipped.append(remote.local_name)
                        continue
                    raise DownloadError(
                        f"{repo} has no file {remote.path!r} at {commit[:12]}; the model "
                        "catalog may be out of date"
                    )
                sha256 = entry.lfs.sha256 if entry.lfs is not None else None
                partial = PlannedFile(remote, commit, int(entry.size), sha256, entry.blob_id, 0)
                planned.append(replace(partial, on_disk=self._bytes_on_disk(partial)))
        return DownloadPlan(self.folder, tuple(planned), tuple(gated), tuple(skipped))

    def _bytes_on_disk(self, f: PlannedFile) -> int:
        target = self.folder / f.remote.local_name
        if target.is_file() and target.stat().st_size == f.size:
            return f.size
        download_dir = f.remote.local_dir(self.folder) / _METADATA_DIR
        if not download_dir.is_dir():
            return 0
        partials = [p.stat().st_size for p in download_dir.rglob(f"*.{f.etag}.incomplete")]
        return min(max(partials, default=0), f.size)

    def check_disk_space(self, plan: DownloadPlan) -> None:
        needed = plan.bytes_to_fetch
        if needed == 0:
            return
        probe = self.folder
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        if free < needed + SPACE_MARGIN_BYTES:
            raise NotEnoughSpaceError(
                f"not enough disk space in {probe}: the download needs {format_bytes(needed)} "
                f"more (plus {format_bytes(SPACE_MARGIN_BYTES)} to spare) but only "
                f"{format_bytes(free)} is free. Free some space or choose a local folder.",
                needed,
                free,
            )

    # -- downloading ------------------------------------------------------------------------

    def download(
        self,
        plan: DownloadPlan | None = None,
        *,
        cancel: threading.Event | None = None,
        on_progress: ProgressCallback | None = None,
        on_stage: StageCallback | None = None,
    ) -> DownloadResult:
        """Fetch every planned file (resuming partial ones), then verify each one's hash.

        Raises DownloadCancelled when `cancel` is set (files and partial files stay), or
        another DownloadError whose message says what went wrong and what to do.
        """
        cancel = cancel or threading.Event()
        if plan is None:
            if on_stage is not None:
                on_stage("planning", "")
            plan = self.plan()
        self.check_disk_space(plan)
        _route_progress_bars()
        total = plan.total_bytes
        done = 0
        fetched = 0
        paths: list[Path] = []
        verified: list[str] = []
        if on_progress is not None:
            on_progress(plan.bytes_on_disk, total, "")
        for f in plan.files:
            if cancel.is_set():
                raise self._cancelled(plan)
            if on_stage is not None:
                on_stage("downloading", f.name)
            meter = _FileMeter(f, done, total, on_progress, cancel)
            _ROUTE.meter = meter
            try:
                path = Path(
                    hf_hub_download(
                        f.remote.repo,
                        f.remote.path,
                        revision=f.commit,
                        local_dir=f.remote.local_dir(self.folder),
                        endpoint=self.endpoint,
                        token=self.token,
                        library_name="contextspan",
                    )
                )
            except DownloadCancelled:
                raise self._cancelled(plan) from None
            except Exception as exc:
                raise self._explain(exc, f.remote.repo, f.remote.path) from exc
            finally:
                _ROUTE.meter = None
                fetched += meter.fetched
            done += f.size
            if on_progress is not None:
                on_progress(done, total, f.name)
            if on_stage is not None:
                on_stage("verifying", f.name)
            self._verify(f, path, cancel, plan)
            paths.append(path)
            verified.append(f.name)
        return DownloadResult(plan.folder, tuple(paths), tuple(verified), fetched, plan.skipped)

    def _verify(self, f: PlannedFile, path: Path, cancel: threading.Event,
                plan: DownloadPlan) -> None:
        if f.sha256 is not None:
            kind, expected = "sha256", f.sha256
            actual = _hash_file(path, hashlib.sha256(), cancel)
        else:
            kind, expected = "git blob sha1", f.blob_id
            actual = _hash_file(path, _git_blob_hasher(path.stat().st_size), cancel)
        if actual is None:
            raise self._cancelled(plan)
        if actual.lower() == expected.lower():
            return
        path.unlink(missing_ok=True)
        metadata = f.remote.local_dir(self.folder) / _METADATA_DIR / f"{f.remote.path}.metadata"
        metadata.unlink(missing_ok=True)  # so huggingface_hub fetches it afresh next time
        raise IntegrityError(
            f"{f.name} is corrupt: its {kind} is {actual[:16]}… but the hub says "
            f"{expected[:16]}…. The file was deleted; download again to fetch it afresh.",
            f.name,
            expected,
            actual,
        )

    def _cancelled(self, plan: DownloadPlan) -> DownloadCancelled:
        kept = sum(self._bytes_on_disk(f) for f in plan.files)
        return DownloadCancelled(
            f"Download cancelled. {format_bytes(kept)} of {format_bytes(plan.total_bytes)} is "
            "kept on disk; the next download resumes from there."
        )

    # -- error messages ---------------------------------------------------------------------

    def _explain(self, exc: BaseException, repo: str, path: str) -> DownloadError:
        """Turn huggingface_hub's and requests' exceptions into a message for the user."""
        if isinstance(exc, DownloadError):
            return exc
        hub = self.hub_url
        model_url = f"{hub}/{repo}"
        if isinstance(exc, GatedRepoError):
            status = exc.response.status_code if exc.response is not None else 0
            token_sent = self.token is not None or status == 403
            licence = f" ({self.licence})" if self.licence else ""
            first = (
                "Your token was accepted but this account has not accepted the licence yet."
                if status == 403
                else "No valid Hugging Face token was sent."
            )
            return GatedRepoAccessError(
                f"{repo} is gated: its licence{licence} must be accepted before it can be "
                f"downloaded. {first} 1) Sign in on Hugging Face and accept the licence on the "
                f"model page, {model_url} (access may take a moment to be granted). "
                f"2) Create a read token at {TOKEN_SETTINGS_URL} and enter it here, or set "
                "HF_TOKEN. Then download again.",
                repo,
                model_url,
                token_sent,
            )
        if isinstance(exc, RevisionNotFoundError):
            return DownloadError(f"{repo} has no such revision; the model catalog may be wrong")
        if isinstance(exc, OfflineModeIsEnabled):
            return HubUnreachableError(
                "Hugging Face offline mode is on (HF_HUB_OFFLINE is set): unset it to download, "
                "or choose a local folder."
            )
        if isinstance(exc, LocalEntryNotFoundError):
            cause = exc.__cause__ or exc.__context__
            return HubUnreachableError(
                f"Could not reach {hub} to fetch {path} ({_short(cause or exc)}). Check the "
                "internet connection (or proxy) and try again; files already fetched are kept."
            )
        if isinstance(exc, RepositoryNotFoundError):
            return DownloadError(
                f"{repo} was not found on {hub}, or it is private and the token cannot read it."
            )
        if isinstance(exc, EntryNotFoundError):
            return DownloadError(
                f"{repo} has no file {path!r}; the model catalog may be out of date"
            )
        if isinstance(exc, HfHubHTTPError):
            answer = exc.response.status_code if exc.response is not None else "?"
            return DownloadError(f"{hub} answered HTTP {answer} for {path}: {_short(exc)}")
        if isinstance(exc, requests.exceptions.ChunkedEncodingError):
            return HubUnreachableError(
                f"The connection to {hub} dropped while fetching {path} ({_short(exc)}). "
                "Try again: the partial file is kept and the download resumes where it stopped."
            )
        if isinstance(exc, (requests.ConnectionError, requests.Timeout)):
            return HubUnreachableError(
                f"Could not reach {hub} ({_short(exc)}). Check the internet connection (or "
                "proxy) and try again; files already fetched are kept."
            )
        if isinstance(exc, OSError):
            return DownloadError(f"Could not write {path} into {self.folder}: {_short(exc)}")
        return DownloadError(f"Downloading {path} from {repo} failed: {_short(exc)}")


def _is_absent(exc: BaseException) -> bool:
    return isinstance(exc, (RepositoryNotFoundError, EntryNotFoundError,
                            RevisionNotFoundError)) and not isinstance(exc, GatedRepoError)


def _short(exc: BaseException) -> str:
    """A few words a person can act on, not urllib3's nested retry report."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    lowered = text.lower()
    if "nameresolution" in lowered or "name or service not known" in lowered or (
            "temporary failure in name resolution" in lowered):
        return "the name could not be resolved: no network or no DNS"
    if "connection refused" in lowered:
        return "the connection was refused"
    if "timed out" in lowered or "timeout" in lowered:
        return "the connection timed out"
    return text if len(text) <= 200 else text[:197] + "…"


def _git_blob_hasher(size: int) -> Any:
    h = hashlib.sha1(usedforsecurity=False)
    h.update(f"blob {size}\0".encode())
    return h


def _blocks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while block := fh.read(_HASH_BLOCK):
            yield block


def _hash_file(path: Path, hasher: Any, cancel: threading.Event) -> str | None:
    """The hex digest, or None if cancelled (hashing 15 GB takes a while)."""
    for block in _blocks(path):
        if cancel.is_set():
            return None
        hasher.update(block)
    return hasher.hexdigest()
