"""The model catalog: one JSON manifest per supported checkpoint, in `models/`, and one per
checkpoint trained here, in `<data dir>/models/` (app/training writes those).

A manifest says where the files come from, how injected spans are wrapped for that
checkpoint (a property of its training, not a constant in code), the defaults used to
sample from it, and how a conversation starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.checkpoints.manifest_folder import CatalogError, load_manifest_folder
from app.paths import CATALOG_DIR, checkpoints_dir, data_dir


@dataclass(frozen=True)
class SpanWrapping:
    """What goes around every injected span: text markers ("<system>") or token ids.

    Empty strings and empty id tuples mean no wrapping. Ids, when given, take precedence:
    the Context Spanning checkpoint delimits a span with ids 12 and 13 (byte pieces no text
    can reach once control characters are removed).
    """

    open: str = ""
    close: str = ""
    trained: bool = False  # True when the checkpoint was trained on this wrapping
    open_ids: tuple[int, ...] = ()
    close_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class SpanPlacement:
    """How a span's positions enter the model.

    "positions" (vanilla Moshi, never trained on spans): text ids in stream 0 and the zero
    token in the 16 audio streams, fed to the transformer between two frames, split across
    frames when long; the generator's own frame bookkeeping is left alone.
    "block" (checkpoints trained on span blocks): one column per span token carrying fixed
    placeholder codes in the audio rows, fed in ONE forward after the pending live column;
    the generator's ring and offset advance by the block (see engine/columns.py).
    """

    kind: str = "positions"
    # Codes of the placeholder rows of a block: the model's own silence (8 agent rows) and
    # the user-side 440 Hz tone (8 user rows). None: encoded with the loaded Mimi.
    agent_codes: tuple[int, ...] | None = None
    user_codes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Retrieval:
    """What starts an LLM turn, and how its answer is timed.

    "end_of_turn": the user's end of turn (and clear mid-turn questions), for checkpoints
    that were never trained to ask. "ret_token": the model itself emits `ret_id` in its text
    stream when it needs information; the question is then taken from the recognised speech
    and the answer must land within `deadline_s` of that token, or it is dropped.
    """

    trigger: str = "end_of_turn"
    ret_id: int | None = None
    deadline_s: float = 2.5
    fresh_final_s: float = 3.0  # a final transcript this recent is the question
    wait_final_s: float = 1.0  # while the user is still speaking, wait this long for it
    window_s: float = 12.0  # otherwise: the words of this much recent user audio
    lowercase_question: bool = False  # the reference's recogniser lower-cases its output


@dataclass(frozen=True)
class SamplingDefaults:
    dtype: str = "bfloat16"
    temp: float = 0.8
    temp_text: float = 0.7
    top_k: int = 250
    top_k_text: int = 25
    cfg_coef: float = 1.0


@dataclass(frozen=True)
class ConversationStart:
    """How the checkpoint's conversation begins before the first user frame.

    `kind` is "none" (Moshi) or "persona_prompt" (PersonaPlex and its fine-tunes: a voice
    prompt, silence, the persona text one token per frame, silence; every row forced, fed
    through the forcing generator in one batched forward).
    """

    kind: str = "none"
    voices_dir: str = "voices"
    voices_archive: str | None = None
    default_voice: str | None = None
    default_role: str = ""
    role_wrapping: SpanWrapping = field(default_factory=SpanWrapping)
    silence_frames: int = 6
    # "always": silence after the persona even when it is empty (PersonaPlex's server);
    # "after_persona": only when there was persona text (the Context Spanning engine).
    trailing_silence: str = "always"
    # Append " The user's name is N." and " The user is in C." to the persona (the phrasing
    # the Context Spanning training corpus used), when the user gave them in settings.
    profile_sentences: bool = False
    # Mimi codes of the model's own silence and of the user-side 440 Hz tone that the
    # reference server feeds during prompts. None: encode them with the loaded Mimi.
    agent_silence_codes: tuple[int, ...] | None = None
    user_tone_codes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Architecture:
    """Named model shapes (app/checkpoints/architectures.py), for repositories that ship
    weights without a config.json (PersonaPlex and the Context Spanning release)."""

    lm: str
    mimi: str = "moshi"


@dataclass(frozen=True)
class Manifest:
    id: str
    display_name: str
    family: str
    source_kind: str  # "huggingface", "local" or "built"
    hf_repo: str | None
    hf_revision: str | None
    files: dict[str, str]  # role ("moshi", "mimi", "tokenizer", "config", ...) -> file name
    local_folder: str | None
    builder: str | None  # for source_kind == "built": the preset that builds it
    gated: bool
    licence: str
    span_wrapping: SpanWrapping
    sampling: SamplingDefaults
    max_span_tokens: int
    max_chunk_positions: int
    conversation_start: ConversationStart
    notes: str = ""
    # A model for developing ContextSpan (random weights for timing or tests): Settings
    # offers it only when asked for (DEVELOPER_MODELS_VARIABLE).
    for_developers: bool = False
    # role -> the repository a file comes from when it is not `hf_repo` (the Context
    # Spanning release takes Mimi and the tokenizer from the PersonaPlex repository).
    file_repos: dict[str, str] = field(default_factory=dict)
    architecture: Architecture | None = None
    generator: str = "moshi"  # its column bookkeeping (engine/columns.py): "moshi" or "forcing"
    span_placement: SpanPlacement = field(default_factory=SpanPlacement)
    retrieval: Retrieval = field(default_factory=Retrieval)
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def control_ids(self) -> frozenset[int]:
        """Ids that steer the checkpoint (`<ret>`, the span delimiters): never words in the
        transcript, never span content."""
        ret = [self.retrieval.ret_id] if self.retrieval.ret_id is not None else []
        return frozenset(ret + list(self.span_wrapping.open_ids)
                         + list(self.span_wrapping.close_ids))

    def default_folder(self) -> Path:
        """Where this checkpoint's files live on disk once built or downloaded."""
        if self.local_folder:
            return Path(self.local_folder).expanduser()
        return checkpoints_dir() / self.id


def _wrapping(raw: dict[str, Any] | None) -> SpanWrapping:
    raw = raw or {}
    return SpanWrapping(
        open=str(raw.get("open", "")),
        close=str(raw.get("close", "")),
        trained=bool(raw.get("trained", False)),
        open_ids=tuple(int(i) for i in raw.get("open_ids", ())),
        close_ids=tuple(int(i) for i in raw.get("close_ids", ())),
    )


def _codes(raw: Any) -> tuple[int, ...] | None:
    if raw is None:
        return None
    return tuple(int(x) for x in raw)


GENERATORS = ("moshi", "forcing")
PLACEMENTS = ("positions", "block")
TRIGGERS = ("end_of_turn", "ret_token")


def _placement(raw: dict[str, Any] | None, origin: str) -> SpanPlacement:
    raw = raw or {}
    placement = SpanPlacement(
        kind=str(raw.get("kind", "positions")),
        agent_codes=_codes(raw.get("agent_codes")),
        user_codes=_codes(raw.get("user_codes")),
    )
    if placement.kind not in PLACEMENTS:
        raise CatalogError(f"{origin}: unknown span_placement kind {placement.kind!r}")
    return placement


def _retrieval(raw: dict[str, Any] | None, origin: str) -> Retrieval:
    raw = dict(raw or {})
    retrieval = Retrieval(**raw)
    if retrieval.trigger not in TRIGGERS:
        raise CatalogError(f"{origin}: unknown retrieval trigger {retrieval.trigger!r}")
    if retrieval.trigger == "ret_token" and retrieval.ret_id is None:
        raise CatalogError(f"{origin}: a ret_token trigger needs its ret_id")
    if not 0 < retrieval.deadline_s < 60:
        raise CatalogError(f"{origin}: retrieval deadline_s must be between 0 and 60 s")
    return retrieval


def _architecture(raw: dict[str, Any] | None) -> Architecture | None:
    if raw is None:
        return None
    return Architecture(lm=str(raw["lm"]), mimi=str(raw.get("mimi", "moshi")))


def _files(raw: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """Roles to file names, and roles whose file lives in another repository. A file is
    written as its name, or as {"name": ..., "repo": ...}."""
    names: dict[str, str] = {}
    repos: dict[str, str] = {}
    for role, value in raw.items():
        if isinstance(value, dict):
            names[role] = str(value["name"])
            if value.get("repo"):
                repos[role] = str(value["repo"])
        else:
            names[role] = str(value)
    return names, repos


def parse_manifest(raw: dict[str, Any], origin: str = "<manifest>") -> Manifest:
    try:
        source = raw["source"]
        kind = source["kind"]
        if kind not in ("huggingface", "local", "built"):
            raise CatalogError(f"{origin}: unknown source kind {kind!r}")
        start_raw = raw.get("conversation_start") or {"kind": "none"}
        start = ConversationStart(
            kind=start_raw.get("kind", "none"),
            voices_dir=start_raw.get("voices_dir", "voices"),
            voices_archive=start_raw.get("voices_archive"),
            default_voice=start_raw.get("default_voice"),
            default_role=start_raw.get("default_role", ""),
            role_wrapping=_wrapping(start_raw.get("role_wrapping")),
            silence_frames=int(start_raw.get("silence_frames", 6)),
            trailing_silence=str(start_raw.get("trailing_silence", "always")),
            profile_sentences=bool(start_raw.get("profile_sentences", False)),
            agent_silence_codes=_codes(start_raw.get("agent_silence_codes")),
            user_tone_codes=_codes(start_raw.get("user_tone_codes")),
        )
        if start.kind not in ("none", "persona_prompt"):
            raise CatalogError(f"{origin}: unknown conversation_start kind {start.kind!r}")
        if start.trailing_silence not in ("always", "after_persona"):
            raise CatalogError(f"{origin}: unknown trailing_silence {start.trailing_silence!r}")
        sampling = SamplingDefaults(**raw.get("sampling", {}))
        generator = str(raw.get("generator", "moshi"))
        if generator not in GENERATORS:
            raise CatalogError(f"{origin}: unknown generator {generator!r}")
        placement = _placement(raw.get("span_placement"), origin)
        if start.kind == "persona_prompt" and generator != "forcing":
            raise CatalogError(f"{origin}: a persona_prompt start needs the forcing generator")
        if placement.kind == "block" and generator != "forcing":
            raise CatalogError(f"{origin}: block spans need the forcing generator")
        if generator == "forcing" and sampling.cfg_coef != 1.0:
            raise CatalogError(f"{origin}: the forcing generator has no classifier-free guidance")
        names, repos = _files(source.get("files", {}))
        return Manifest(
            id=raw["id"],
            display_name=raw["display_name"],
            family=raw.get("family", "moshi"),
            source_kind=kind,
            hf_repo=source.get("repo"),
            hf_revision=source.get("revision"),
            files=names,
            local_folder=source.get("folder"),
            builder=source.get("builder"),
            gated=bool(source.get("gated", False)),
            licence=raw.get("licence", ""),
            span_wrapping=_wrapping(raw.get("span_wrapping")),
            sampling=sampling,
            max_span_tokens=int(raw.get("max_span_tokens", 512)),
            max_chunk_positions=int(raw.get("max_chunk_positions", 256)),
            conversation_start=start,
            notes=raw.get("notes", ""),
            for_developers=bool(raw.get("for_developers", False)),
            file_repos=repos,
            architecture=_architecture(raw.get("architecture")),
            generator=generator,
            span_placement=placement,
            retrieval=_retrieval(raw.get("retrieval"), origin),
            raw=raw,
        )
    except CatalogError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise CatalogError(f"{origin}: malformed manifest ({exc})") from exc


def user_manifests_dir() -> Path:
    """Where the manifests of checkpoints trained here go (app/training writes them): the
    catalog reads these besides `models/`."""
    return data_dir() / "models"


def load_user_manifests(folder: Path | None = None) -> dict[str, Manifest]:
    """The manifests of locally trained checkpoints, by id (a later file wins an id)."""
    return load_manifest_folder(folder or user_manifests_dir(), parse_manifest, name_of=str,
                                unique=False)


DEVELOPER_MODELS_VARIABLE = "CONTEXTSPAN_DEVELOPER_MODELS"


def developer_models_wanted() -> bool:
    """Whether Settings offers the models for developing ContextSpan (random weights for GPU
    timing, layouts for tests): `CONTEXTSPAN_DEVELOPER_MODELS=1` asks for them."""
    return os.environ.get(DEVELOPER_MODELS_VARIABLE, "").strip().lower() in (
        "1", "yes", "true", "on")


def load_catalog(folder: Path = CATALOG_DIR) -> dict[str, Manifest]:
    """The manifests in `folder`, by id. The shipped catalog also holds the checkpoints the
    user trained (`user_manifests_dir()`); a shipped id is never replaced by one of those."""
    catalog = load_manifest_folder(folder, parse_manifest)
    if folder == CATALOG_DIR:
        catalog |= {k: v for k, v in load_user_manifests().items() if k not in catalog}
    return catalog


def get_manifest(model_id: str, folder: Path = CATALOG_DIR) -> Manifest:
    catalog = load_catalog(folder)
    if model_id not in catalog:
        known = ", ".join(sorted(catalog))
        raise CatalogError(f"unknown model {model_id!r} (known: {known})")
    return catalog[model_id]
