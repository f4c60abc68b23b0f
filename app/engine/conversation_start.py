"""A checkpoint's own start of conversation, driven by its manifest.

PersonaPlex (read from its reference server's `step_system_prompts`) feeds, before the
first user frame: the voice prompt (the agent's audio codes, text PAD), then silence, then
the role prompt one text token per frame wrapped in <system> tags, then silence. All the
while the user stream carries a 440 Hz tone. These are ordinary frames whose tokens are
forced, so they go through `LMGen.step` and advance its frame bookkeeping, as they do there.

Voice prompts are audio files (encoded with Mimi here) or PersonaPlex's `.pt` files, which
hold the per-frame input embeddings its server saved and the token ring after them.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from moshi.models import LMGen, MimiModel

from app.checkpoints.catalog import ConversationStart
from app.engine.span_text import SpanTokenizer

FRAME_SAMPLES = 1920
SAMPLE_RATE = 24000


class ConversationStartError(RuntimeError):
    pass


@dataclass(frozen=True)
class PromptFrame:
    text_id: int
    agent_codes: tuple[int, ...]  # the model's own 8 codebooks for this frame


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
    suffixes = (".wav", ".pt", ".mp3", ".flac", ".ogg")
    names = {p.stem for p in folder.iterdir() if p.suffix in suffixes}
    return sorted(names)


def _voice_file(folder: Path, voice: str) -> Path:
    candidates = [folder / f"{voice}{ext}" for ext in (".pt", ".wav", ".flac", ".ogg", ".mp3")]
    for path in candidates:
        if path.is_file():
            return path
    raise ConversationStartError(f"voice {voice!r} not found in {folder}")


@torch.no_grad()
def _encode_frames(mimi: MimiModel, pcm: np.ndarray) -> list[torch.Tensor]:
    """Encode PCM into per-frame codes [1, 8, 1] with a fresh streaming Mimi."""
    pad = (-len(pcm)) % FRAME_SAMPLES
    pcm = np.concatenate([pcm, np.zeros(pad, dtype=np.float32)])
    frames = []
    device = next(mimi.parameters()).device
    with mimi.streaming(1):
        for start in range(0, len(pcm), FRAME_SAMPLES):
            chunk = torch.from_numpy(pcm[start : start + FRAME_SAMPLES]).to(device)[None, None]
            frames.append(mimi.encode(chunk))
    return frames


def _tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)


@dataclass(frozen=True)
class PromptPlan:
    saved_voice: Path | None  # a PersonaPlex `.pt` voice prompt, replayed as embeddings
    frames: tuple[PromptFrame, ...]  # forced frames: audio voice prompt, silence, role, silence


class PersonaPrompt:
    """Feeds PersonaPlex's prompt phases into a streaming LMGen, frame by frame."""

    def __init__(
        self,
        lm_gen: LMGen,
        mimi: MimiModel,
        start: ConversationStart,
        checkpoint_folder: Path,
        role_tokenizer: SpanTokenizer,
    ) -> None:
        self._lm_gen = lm_gen
        self._mimi = mimi
        self._start = start
        self._folder = checkpoint_folder
        self._role_tokenizer = role_tokenizer
        lm = lm_gen.lm_model
        self._pad = lm.text_padding_token_id
        # Encoded with a fresh streaming Mimi: call before the engine's Mimi streams.
        silence = np.zeros(FRAME_SAMPLES, np.float32)
        self._silence = start.agent_silence_codes or self._codes_of(silence)
        self._tone = start.user_tone_codes or self._codes_of(_tone(FRAME_SAMPLES / SAMPLE_RATE))

    def _codes_of(self, pcm: np.ndarray) -> tuple[int, ...]:
        return tuple(int(c) for c in _encode_frames(self._mimi, pcm)[0][0, :, 0].tolist())

    def voice_frames(self, voice: str) -> list[PromptFrame] | Path:
        """Frames of an audio voice prompt, or the path of a saved `.pt` voice prompt."""
        path = _voice_file(voices_folder(self._start, self._folder), voice)
        if path.suffix == ".pt":
            return path
        import sphn

        pcm, _ = sphn.read(str(path), sample_rate=SAMPLE_RATE)
        mono = np.asarray(pcm, dtype=np.float32).mean(axis=0)
        return [
            PromptFrame(self._pad, tuple(int(c) for c in codes[0, :, 0].tolist()))
            for codes in _encode_frames(self._mimi, mono)
        ]

    def role_frames(self, role: str) -> list[PromptFrame]:
        if not role.strip():
            return []
        ids = self._role_tokenizer.encode(role).ids
        return [PromptFrame(i, self._silence) for i in ids]

    def silence_frames(self) -> list[PromptFrame]:
        return [PromptFrame(self._pad, self._silence)] * self._start.silence_frames

    @torch.no_grad()
    def _force(self, frames: list[PromptFrame]) -> None:
        """Step through frames whose text and agent audio are given, not sampled.

        LMGen's token ring holds, at position p, the text of time p and codebook k of time
        p - delay_k; the step taken at offset s writes position s + 1.
        """
        lm_gen = self._lm_gen
        lm = lm_gen.lm_model
        state = lm_gen._streaming_state
        device = lm.device
        user = torch.tensor(self._tone, dtype=torch.long, device=device).view(1, -1, 1)
        user = user.expand(state.batch_size, -1, -1)
        agent_delays = lm.delays[1 : lm.dep_q + 1]
        for i, frame in enumerate(frames):
            agent = []
            for k, delay in enumerate(agent_delays):
                source = i - delay
                codes = frames[source].agent_codes if source >= 0 else self._silence
                agent.append(codes[k])
            replace = torch.tensor(agent, dtype=torch.long, device=device).view(1, -1, 1)
            lm_gen.step(user, depformer_replace_tokens=replace.expand(state.batch_size, -1, -1))
            position = int(state.offsets[0]) % state.cache.shape[-1]
            state.cache[:, 0, position] = frame.text_id

    @torch.no_grad()
    def _replay_saved_voice(self, path: Path) -> int:
        """Feed a PersonaPlex `.pt` voice prompt: its saved per-frame input embeddings go
        through the temporal transformer in one pass, then LMGen's frame bookkeeping is set
        to where the reference server's would stand after those frames."""
        saved = torch.load(path, map_location="cpu", weights_only=True)
        lm_gen = self._lm_gen
        lm = lm_gen.lm_model
        state = lm_gen._streaming_state
        embeddings = saved["embeddings"].to(device=lm.device, dtype=lm.dtype)  # [N, B, 1, dim]
        frames = embeddings.shape[0]
        x = embeddings[:, 0, 0, :].unsqueeze(0).expand(state.batch_size, -1, -1)  # [B, N, dim]
        lm.transformer(x)
        ring = saved["cache"].to(lm.device)  # [B, 17, their ring size]
        # The reference's model call number n consumed position n - 1; after N calls its
        # offset is N + 1 and the ring positions N - 1 .. N hold the last inputs.
        offset = frames
        theirs, ours = ring.shape[-1], state.cache.shape[-1]
        for position in range(max(0, offset - ours + 1), offset + 1):
            state.cache[:, :, position % ours] = ring[:, :, position % theirs]
        state.offsets[:] = offset
        state.offset_cpu = offset
        return frames

    def plan(self, voice: str | None, role: str | None) -> PromptPlan:
        """Encode everything the prompt needs. Runs before Mimi starts streaming."""
        saved_voice = None
        frames: list[PromptFrame] = []
        voice = voice or self._start.default_voice
        if voice:
            voice_prompt = self.voice_frames(voice)
            if isinstance(voice_prompt, Path):
                saved_voice = voice_prompt
            else:
                frames += voice_prompt
        role = role if role is not None else self._start.default_role
        frames += self.silence_frames() + self.role_frames(role) + self.silence_frames()
        return PromptPlan(saved_voice, tuple(frames))

    def feed(self, plan: PromptPlan) -> int:
        """Feed the planned phases into the streaming LMGen. Returns the frames used."""
        replayed = self._replay_saved_voice(plan.saved_voice) if plan.saved_voice else 0
        # One pass over all forced phases, so delayed codebooks carry across their borders.
        self._force(list(plan.frames))
        return replayed + len(plan.frames)
