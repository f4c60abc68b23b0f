"""A persona checkpoint's own start of conversation, as a list of fully forced frames.

PersonaPlex and its Context Spanning fine-tune were trained to start from, before the first
user frame, with every row given (user rows always the 440 Hz tone's codes, never empty):
1. one frame per voice-prompt frame: the model's rows are the voice's Mimi codes, text PAD;
2. silence frames (the model's silence codes, text PAD), after a voice;
3. one frame per token of the persona text `<system> persona <system>` (the user's name and
   city appended in the training corpus's phrasing, where the checkpoint was trained so),
   the model's rows silent;
4. silence frames again (PersonaPlex always; the Context Spanning engine only after a
   persona).
The frames go through `LocalEngine.prefill_forced` (columns.ForcingColumns.forced_start),
the reference's step bookkeeping with ONE batched forward (equal to feeding them one by one;
tested).

A voice is a Mimi-codes file (`{"codes": LongTensor[8, P]}`, the Context Spanning release),
a recording (resampled to 24 kHz, levelled to -24 LUFS, Mimi-encoded), or a PersonaPlex
`.pt` of saved input embeddings and token ring, replayed through the transformer.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import sentencepiece
import torch
from moshi.models import MimiModel

from app.checkpoints.catalog import ConversationStart, Manifest
from app.engine.columns import ForcedStep
from app.frames import FRAME_S, FRAME_SAMPLES, SAMPLE_RATE

VOICE_LUFS = -24.0
_AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")


class ConversationStartError(RuntimeError):
    pass


def voices_folder(start: ConversationStart, checkpoint_folder: Path) -> Path:
    """The voices folder, unpacked from the checkpoint's archive on first use."""
    folder = checkpoint_folder / start.voices_dir
    if folder.is_dir():
        return folder
    if start.voices_archive and (checkpoint_folder / start.voices_archive).is_file():
        with tarfile.open(checkpoint_folder / start.voices_archive, "r:gz") as archive:
            archive.extractall(checkpoint_folder, filter="data")  # no paths outside the folder
        if folder.is_dir():
            return folder
    raise ConversationStartError(f"no voices folder in {checkpoint_folder}")


def list_voices(start: ConversationStart, checkpoint_folder: Path) -> list[str]:
    try:
        folder = voices_folder(start, checkpoint_folder)
    except ConversationStartError:
        return []
    names = {p.stem for p in folder.iterdir() if p.suffix in (".pt", *_AUDIO_SUFFIXES)}
    return sorted(names)


def voice_file(start: ConversationStart, checkpoint_folder: Path, voice: str) -> Path:
    """A voice by name in the checkpoint's voices folder, or a path to a file of one."""
    as_path = Path(voice).expanduser()
    if as_path.suffix in (".pt", *_AUDIO_SUFFIXES) and as_path.is_file():
        return as_path
    folder = voices_folder(start, checkpoint_folder)
    for suffix in (".pt", *_AUDIO_SUFFIXES):
        path = folder / f"{voice}{suffix}"
        if path.is_file():
            return path
    raise ConversationStartError(f"voice {voice!r} not found in {folder}")


@torch.no_grad()
def encode_pcm(mimi: MimiModel, pcm: npt.NDArray[np.float32]) -> torch.Tensor:
    """Mimi codes [8, P] of a 24 kHz recording, encoded in one (non-streaming) pass with
    its end padded to whole frames."""
    pad = (-len(pcm)) % FRAME_SAMPLES
    pcm = np.concatenate([np.asarray(pcm, np.float32), np.zeros(pad, np.float32)])
    device = next(mimi.parameters()).device
    codes = mimi.encode(torch.from_numpy(pcm).to(device)[None, None])  # [1, 8, P]
    return codes[0].to(torch.long).cpu()


def tone(seconds: float) -> npt.NDArray[np.float32]:
    """The user-side 'silence' of PersonaPlex's prompts: a 440 Hz sine at amplitude 0.5."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)


@dataclass(frozen=True)
class Placeholders:
    """The codes a forced frame carries where nobody speaks: the model's own silence in
    its 8 rows, the 440 Hz tone in the user's 8 rows."""

    agent: tuple[int, ...]
    user: tuple[int, ...]


def placeholder_codes(mimi: MimiModel, agent: tuple[int, ...] | None,
                      user: tuple[int, ...] | None) -> Placeholders:
    """The manifest's codes, or (a tiny checkpoint's Mimi) silence and the tone encoded.
    Encoded outside Mimi's streaming state: call before the engine's Mimi streams."""
    if agent is None:
        agent = tuple(encode_pcm(mimi, np.zeros(FRAME_SAMPLES, np.float32))[:, 0].tolist())
    if user is None:
        user = tuple(encode_pcm(mimi, tone(FRAME_S))[:, 0].tolist())
    return Placeholders(tuple(int(c) for c in agent), tuple(int(c) for c in user))


def persona_text(persona: str, name: str | None = None, city: str | None = None) -> str:
    """The persona with the user's name and city in the training corpus's phrasing."""
    text = persona.strip()
    for value, phrase in ((name, "The user's name is {}."), (city, "The user is in {}.")):
        value = (value or "").strip()
        if value:
            text = f"{text} {phrase.format(value)}" if text else phrase.format(value)
    return text


def persona_ids(tokenizer: sentencepiece.SentencePieceProcessor, start: ConversationStart,
                text: str, forbidden: frozenset[int]) -> list[int]:
    """`<open> text <close>` tokenized in one piece, as the checkpoint saw it in training.
    Ids no text should produce (control, unknown, the span and <ret> ids) are dropped."""
    text = text.strip()
    if not text:
        return []
    wrapping = start.role_wrapping
    if wrapping.open and not text.startswith(wrapping.open):
        text = f"{wrapping.open} {text} {wrapping.close}".strip()
    ids = tokenizer.encode(text)
    return [i for i in ids if i not in forbidden and not (
        tokenizer.is_control(i) or tokenizer.is_unknown(i))]


@dataclass(frozen=True)
class SavedVoice:
    """A PersonaPlex `.pt` voice prompt: saved input embeddings and the ring after them."""

    embeddings: torch.Tensor
    ring: torch.Tensor


@dataclass(frozen=True)
class StartPlan:
    saved_voice: SavedVoice | None
    steps: tuple[ForcedStep, ...]
    voice_frames: int
    persona_tokens: int


def load_voice(path: Path, mimi: MimiModel) -> torch.Tensor | SavedVoice:
    """Mimi codes [8, P] of a voice file, or a PersonaPlex saved voice."""
    if path.suffix == ".pt":
        saved = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(saved, dict) and "codes" in saved:
            codes = torch.as_tensor(saved["codes"]).to(torch.long)
            if codes.dim() == 3:
                codes = codes[0]
            if codes.dim() != 2 or codes.shape[0] < 8:
                raise ConversationStartError(f"{path.name}: codes of shape "
                                             f"{tuple(codes.shape)}, expected [8, P]")
            return codes[:8]
        if isinstance(saved, dict) and "embeddings" in saved and "cache" in saved:
            return SavedVoice(saved["embeddings"], saved["cache"])
        raise ConversationStartError(f"{path.name} holds neither Mimi codes nor a saved voice")
    import sphn

    from app.audio.user_leveller import normalize_loudness

    pcm, _ = sphn.read(str(path), sample_rate=SAMPLE_RATE)
    mono = np.asarray(pcm, dtype=np.float32).mean(axis=0)
    return encode_pcm(mimi, normalize_loudness(mono, SAMPLE_RATE, VOICE_LUFS))


def plan_start(manifest: Manifest, checkpoint_folder: Path, mimi: MimiModel,
               tokenizer: sentencepiece.SentencePieceProcessor, placeholders: Placeholders,
               pad_id: int, forbidden: frozenset[int], voice: str | None = None,
               persona: str | None = None, user_name: str | None = None,
               user_city: str | None = None) -> StartPlan:
    """Every forced frame of the start, in order. Encodes the voice: call before Mimi
    streams."""
    start = manifest.conversation_start
    silence = ForcedStep(placeholders.user, placeholders.agent, pad_id)
    steps: list[ForcedStep] = []
    saved: SavedVoice | None = None
    voice_frames = 0
    voice = voice or start.default_voice
    if voice:
        loaded = load_voice(voice_file(start, checkpoint_folder, voice), mimi)
        if isinstance(loaded, SavedVoice):
            saved = loaded
            voice_frames = int(loaded.embeddings.shape[0])
        else:
            voice_frames = int(loaded.shape[1])
            steps += [ForcedStep(placeholders.user, tuple(int(c) for c in loaded[:, p].tolist()),
                                 pad_id) for p in range(voice_frames)]
        steps += [silence] * start.silence_frames
    text = start.default_role if persona is None else persona
    if start.profile_sentences:
        text = persona_text(text, user_name, user_city)
    ids = persona_ids(tokenizer, start, text, forbidden)
    steps += [ForcedStep(placeholders.user, placeholders.agent, i) for i in ids]
    if ids or start.trailing_silence == "always":
        steps += [silence] * start.silence_frames
    return StartPlan(saved, tuple(steps), voice_frames, len(ids))
