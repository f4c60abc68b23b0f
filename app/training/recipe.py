"""The recipe for a real span-reading checkpoint: spoken dialogues with facts -> fine-tune.

`python main.py train recipe --model MODEL --dialogues N --steps S --out DIR [--lora]`

1. Text dialogues from templates (`dialogues.py`): the user asks about facts ("Ana's flight
   to Oslo leaves at 7:40 am from gate B12") that only a span holds; the assistant answers
   from them, in spoken form ("seven forty a m").
2. Voices (`tts.py`): espeak-ng, a different voice for each side; the hook takes another
   TTS (Kyutai's through moshi, on a GPU) without changing anything below.
3. Both sides are encoded with the checkpoint's own Mimi (loaded by the app's loader), on
   two channels of one timeline: the user's codes in streams 9..16, the assistant's in
   1..8. The assistant's text stream puts each word's tokens from the frame its speech
   starts (espeak-ng's word events; see tts.py), the pad token between words and the
   end-of-padding token right before a word, as Moshi's text stream does.
4. Several dialogues are concatenated into one conversation, so spans land deep in it; each
   dialogue's facts are injected at a varied distance from its question: right after the
   question (the live look-up), just before it, at the start of its dialogue, or anywhere
   earlier in the conversation.
5. Sequences are built by `span_layout.build_layout` (the engine's own layout), the text loss
   only on the assistant's answers, and `trainer.train` fine-tunes (LoRA for 7B, full for
   the tiny model); `trainer.save_trained` writes a folder the app's loader loads and its
   catalog manifest. Checkpoints with a PersonaPlex start get the same voice/role prelude the
   engine feeds, as ordinary frames without loss. Checkpoints that read spans as blocks are
   laid out by `block_layout` instead (the prelude as its prefix, the reference's weights).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from app.audio_file import write_wav_24k
from app.checkpoints.loader import LoadedCheckpoint
from app.command_options import add_options, cli_option, from_args
from app.engine.span_text import SpanTokenizer
from app.frames import FRAME_RATE, FRAME_SAMPLES, SAMPLE_RATE
from app.training.block_layout import block_training_for, checkpoint_placeholders, prefix_codes
from app.training.dialogues import Dialogue, Turn, make_dialogues
from app.training.span_layout import SpanInsert
from app.training.trainer import TrainConfig, TrainingExample, TrainResult, save_trained, train
from app.training.tts import SpeechSynthesizer, Utterance

PLACEMENTS = ("after_question", "before_question", "dialogue_start", "earlier")


@dataclass(frozen=True)
class RecipeConfig:
    """The recipe's knobs; `train recipe`'s flags for them are declared here
    (app/command_options.py)."""

    dialogues: int = field(default=2000, metadata=cli_option(
        "--dialogues", help="dialogues to generate"))
    # dialogues concatenated into one conversation
    max_per_conversation: int = field(default=4, metadata=cli_option(
        "--per-conversation",
        help="at most this many dialogues concatenated into one conversation"))
    steps: int = field(default=1000, metadata=cli_option("--steps"))
    batch_size: int = field(default=4, metadata=cli_option("--batch-size"))
    lr: float | None = field(default=None, metadata=cli_option(  # None: by LoRA or not
        "--lr", help="default 2e-4 with LoRA, 1e-3 in full"))
    # None: the trainer decides by size (LoRA for 7B); `--lora` or `--full`: two flags
    lora: bool | None = None
    lora_rank: int = field(default=64, metadata=cli_option("--lora-rank"))
    lora_scaling: float = 2.0
    audio_loss_weight: float = field(default=0.0, metadata=cli_option("--audio-loss-weight"))
    seed: int = field(default=0, metadata=cli_option("--seed"))
    gap_s: tuple[float, float] = (0.3, 0.9)  # silence between turns
    lead_s: tuple[float, float] = (0.4, 1.2)  # silence before a conversation's first turn
    epad: bool = True  # end-of-padding token right before each word, as in Moshi


@dataclass(frozen=True)
class Segment:
    dialogue: int
    turn: Turn
    start_frame: int
    end_frame: int  # exclusive
    first_text_frame: int = -1  # assistant turns: where its text starts and ends
    last_text_frame: int = -1


@dataclass(frozen=True)
class Placement:
    dialogue: int
    kind: str
    frame: int  # conversation frame the span lands before (prelude included)
    question_frame: int
    answer_frame: int
    positions: int
    truncated: bool


@dataclass
class Conversation:
    example: TrainingExample
    dialogues: tuple[Dialogue, ...]
    segments: tuple[Segment, ...]
    placements: tuple[Placement, ...]
    prelude_frames: int
    timing: Counter
    user_pcm: np.ndarray | None = None  # kept for the samples written beside the checkpoint
    assistant_pcm: np.ndarray | None = None


@dataclass
class RecipeData:
    conversations: list[Conversation] = field(default_factory=list)

    def stats(self) -> dict:
        placements = [p for c in self.conversations for p in c.placements]
        frames = [c.example.codes.shape[-1] for c in self.conversations]
        return {
            "conversations": len(self.conversations),
            "dialogues": sum(len(c.dialogues) for c in self.conversations),
            "frames_total": sum(frames),
            "frames_max": max(frames, default=0),
            "audio_seconds": round(sum(frames) / FRAME_RATE, 1),
            "spans": len(placements),
            "span_positions": sum(p.positions for p in placements),
            "spans_truncated": sum(p.truncated for p in placements),
            "placements": dict(Counter(p.kind for p in placements)),
            "max_frames_before_answer": max(
                (p.answer_frame - p.frame for p in placements), default=0),
            "answer_frames": sum(c.example.answer_frame_count() for c in self.conversations),
            "word_timing": dict(sum((c.timing for c in self.conversations), Counter())),
            "user_code_values": self.user_code_values(),
        }

    def user_code_values(self) -> int:
        """Distinct values of the user's first codebook over all data: 1 means the Mimi maps
        all audio to one code (the tiny checkpoint's untrained codebooks do)."""
        values = set()
        for c in self.conversations:
            first_user = c.example.codes.shape[0] - (c.example.codes.shape[0] - 1) // 2
            values |= set(c.example.codes[first_user].tolist())
        return len(values)


# ---- 3. Mimi codes and the text stream -----------------------------------------------------


@torch.no_grad()
def mimi_codes(checkpoint: LoadedCheckpoint, pcm: np.ndarray, codebooks: int) -> torch.Tensor:
    """[codebooks, T] long from 24 kHz PCM (a whole number of frames), non-streaming."""
    mimi = checkpoint.mimi
    param = next(mimi.parameters())
    wave = torch.from_numpy(np.ascontiguousarray(pcm)).to(param.device, param.dtype)
    codes = mimi.encode(wave[None, None])  # [1, K, T]
    if codes.shape[1] < codebooks:
        raise ValueError(f"Mimi gives {codes.shape[1]} codebooks, the model needs {codebooks}")
    return codes[0, :codebooks].long().cpu()


def word_ids(checkpoint: LoadedCheckpoint, word: str) -> list[int]:
    """The word's text tokens as the model spells it (no control, unknown or padding ids)."""
    sp = checkpoint.tokenizer
    lm = checkpoint.lm
    skip = {lm.text_padding_token_id, lm.existing_text_end_padding_id}
    return [i for i in sp.encode(word)
            if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i)) and i not in skip]


def place_words(text: torch.Tensor, start_frame: int, utterance: Utterance,
                checkpoint: LoadedCheckpoint, epad: bool, cursor: int) -> tuple[int, int, int]:
    """Write one utterance's words into the text stream `text` [T] (pad elsewhere).

    Each word's tokens go one per frame from the frame its speech starts, or right after
    the previous word if that one is still being spelled. Returns (first frame, last
    frame, new cursor)."""
    frames = text.shape[0]
    epad_id = checkpoint.lm.existing_text_end_padding_id
    pad = checkpoint.lm.text_padding_token_id
    first = last = -1
    for word in utterance.words:
        ids = word_ids(checkpoint, word.word)
        if not ids:
            continue
        at = max(start_frame + int(word.start_s * FRAME_RATE), cursor)
        if at >= frames:
            break
        if epad and at > cursor and int(text[at - 1]) == pad:
            text[at - 1] = epad_id
        ids = ids[: frames - at]
        text[at : at + len(ids)] = torch.tensor(ids, dtype=torch.long)
        first = at if first < 0 else first
        last = at + len(ids) - 1
        cursor = at + len(ids)
    return first, last, cursor


# ---- 4. conversations: several dialogues, spans at varied distances ------------------------


def _place_span(kind: str, rng: random.Random, dialogue_start: int, question: Segment,
                answer: Segment) -> int:
    if kind == "after_question":  # the live look-up: injected while the answer is due
        return rng.randint(question.end_frame, max(question.end_frame, answer.start_frame))
    if kind == "before_question":
        return max(0, question.start_frame - rng.randint(0, int(2 * FRAME_RATE)))
    if kind == "dialogue_start":
        return max(0, dialogue_start - rng.randint(0, 6))
    return rng.randint(0, dialogue_start)  # "earlier": anywhere before, deep in the past


def persona_prelude(checkpoint: LoadedCheckpoint, span_tokenizer: SpanTokenizer
                    ) -> tuple[torch.Tensor, list[str]]:
    """The persona start the engine feeds (voice prompt, silence, persona, silence), as
    aligned codes [17, P]: every row forced, the user's rows the 440 Hz tone. Empty for
    checkpoints without one.

    A voice prompt saved as embeddings (`.pt`) has no codes: it is left out (noted)."""
    from app.engine.conversation_start import plan_start

    lm = checkpoint.lm
    manifest = checkpoint.manifest
    start = manifest.conversation_start
    if start.kind != "persona_prompt":
        return torch.zeros(lm.num_codebooks, 0, dtype=torch.long), []
    plan = plan_start(manifest, checkpoint.folder, checkpoint.mimi, checkpoint.tokenizer,
                      checkpoint_placeholders(checkpoint), lm.text_padding_token_id,
                      span_tokenizer.control_ids)
    notes = []
    if plan.saved_voice is not None:
        notes.append("the voice prompt is saved embeddings: left out")
    if not plan.steps:
        return torch.zeros(lm.num_codebooks, 0, dtype=torch.long), notes
    return prefix_codes(plan.steps), notes


def build_conversation(checkpoint: LoadedCheckpoint, dialogues: Sequence[Dialogue],
                       synthesizer: SpeechSynthesizer, span_tokenizer: SpanTokenizer,
                       config: RecipeConfig, rng: random.Random,
                       prelude: torch.Tensor | None = None, keep_audio: bool = False
                       ) -> Conversation:
    lm = checkpoint.lm
    # One timeline, two channels: every turn after the previous one, a short gap between.
    timeline: list[tuple[int, Turn, int, Utterance]] = []  # (dialogue, turn, start sample, ..)
    at = int(rng.uniform(*config.lead_s) * SAMPLE_RATE)
    dialogue_starts = []
    for d, dialogue in enumerate(dialogues):
        dialogue_starts.append(at)
        for turn in dialogue.turns:
            utterance = synthesizer.synthesize(turn.text, turn.speaker)
            timeline.append((d, turn, at, utterance))
            at += len(utterance.pcm) + int(rng.uniform(*config.gap_s) * SAMPLE_RATE)
    samples = -(-at // FRAME_SAMPLES) * FRAME_SAMPLES
    channels = {"user": np.zeros(samples, np.float32), "assistant": np.zeros(samples, np.float32)}
    for _, turn, start, utterance in timeline:
        channels[turn.speaker][start : start + len(utterance.pcm)] += utterance.pcm
    frames = samples // FRAME_SAMPLES
    per_side = (lm.num_codebooks - 1) // 2  # 8 each, whether the depformer has 8 or 16
    codes = torch.empty(lm.num_codebooks, frames, dtype=torch.long)  # [17, T]
    codes[1 : 1 + per_side] = mimi_codes(checkpoint, channels["assistant"], per_side)
    codes[1 + per_side :] = mimi_codes(checkpoint, channels["user"], per_side)
    text = torch.full((frames,), lm.text_padding_token_id, dtype=torch.long)
    answer = torch.zeros(frames, dtype=torch.bool)
    segments: list[Segment] = []
    cursor = 0
    timing: Counter = Counter()
    for d, turn, start, utterance in timeline:
        start_frame = start // FRAME_SAMPLES
        end_frame = -(-(start + len(utterance.pcm)) // FRAME_SAMPLES)
        first = last = -1
        if turn.speaker == "assistant":
            timing[utterance.timing] += 1
            first, last, cursor = place_words(text, start_frame, utterance, checkpoint,
                                              config.epad, cursor)
            if turn.answer and first >= 0:  # the EPAD before, the words, the pad after
                answer[max(0, first - 1) : min(frames, last + 2)] = True
        segments.append(Segment(d, turn, start_frame, end_frame, first, last))
    codes[0] = text

    placements = []
    spans = []
    for d, dialogue in enumerate(dialogues):
        mine = [s for s in segments if s.dialogue == d]
        q = next(i for i, s in enumerate(mine) if s.turn.question)
        question, reply = mine[q], mine[q + 1]
        kind = rng.choice(PLACEMENTS)
        frame = _place_span(kind, rng, dialogue_starts[d] // FRAME_SAMPLES, question, reply)
        tokens = span_tokenizer.encode(dialogue.facts)
        spans.append(SpanInsert(frame, tokens.ids))
        placements.append(Placement(d, kind, frame, question.start_frame,
                                    max(reply.first_text_frame, reply.start_frame),
                                    len(tokens.ids), tokens.truncated))

    p = 0 if prelude is None else prelude.shape[-1]
    prefix = None
    if p and checkpoint.manifest.span_placement.kind == "block":
        prefix = prelude  # the block layout puts the start before the codes itself, no loss
    elif prelude is not None and p:
        # The persona prelude first: ordinary frames, no loss; everything else moves by p.
        codes = torch.cat([prelude, codes], dim=1)
        answer = torch.cat([torch.zeros(p, dtype=torch.bool), answer])
        spans = [replace(s, frame=s.frame + p) for s in spans]
        placements = [replace(pl, frame=pl.frame + p, question_frame=pl.question_frame + p,
                              answer_frame=pl.answer_frame + p) for pl in placements]
        segments = [replace(s, start_frame=s.start_frame + p, end_frame=s.end_frame + p,
                            first_text_frame=s.first_text_frame + p if s.first_text_frame >= 0
                            else -1,
                            last_text_frame=s.last_text_frame + p if s.last_text_frame >= 0
                            else -1) for s in segments]
    example = TrainingExample(codes, tuple(spans), answer, prefix=prefix)
    return Conversation(example, tuple(dialogues), tuple(segments), tuple(placements), p,
                        timing, channels["user"] if keep_audio else None,
                        channels["assistant"] if keep_audio else None)


def build_data(checkpoint: LoadedCheckpoint, synthesizer: SpeechSynthesizer,
               config: RecipeConfig, keep_audio_of_first: bool = True
               ) -> tuple[RecipeData, list[str]]:
    """All conversations: the dialogues grouped 1..max_per_conversation at a time."""
    manifest = checkpoint.manifest
    span_tokenizer = SpanTokenizer(checkpoint.tokenizer, manifest.span_wrapping,
                                   manifest.max_span_tokens)
    rng = random.Random(config.seed)
    prelude, notes = persona_prelude(checkpoint, span_tokenizer)
    dialogues = make_dialogues(config.dialogues, seed=config.seed)
    data = RecipeData()
    i = 0
    while i < len(dialogues):
        size = rng.randint(1, max(1, config.max_per_conversation))
        group = dialogues[i : i + size]
        i += size
        data.conversations.append(build_conversation(
            checkpoint, group, synthesizer, span_tokenizer, config, rng,
            prelude if prelude.shape[-1] else None,
            keep_audio=keep_audio_of_first and not data.conversations))
    return data, notes


def batches(data: RecipeData, batch_size: int, seed: int) -> Iterator[list[TrainingExample]]:
    """Shuffled passes over the conversations, batch_size at a time."""
    rng = random.Random(seed)
    examples = [c.example for c in data.conversations]
    order: list[int] = []
    while True:
        batch: list[TrainingExample] = []
        while len(batch) < batch_size:
            if not order:
                order = list(range(len(examples)))
                rng.shuffle(order)
            batch.append(examples[order.pop()])
        yield batch


# ---- 5. train and save ---------------------------------------------------------------------


def train_config(config: RecipeConfig, lora: bool) -> TrainConfig:
    lr = config.lr if config.lr is not None else (2e-4 if lora else 1e-3)
    return TrainConfig(steps=config.steps, batch_size=config.batch_size, lr=lr,
                       audio_loss_weight=config.audio_loss_weight, lora=lora,
                       lora_rank=config.lora_rank, lora_scaling=config.lora_scaling,
                       seed=config.seed)


def write_samples(data: RecipeData, folder: Path) -> None:
    """The first conversation, to listen to and read: both channels and its timeline."""
    first = data.conversations[0]
    folder.mkdir(parents=True, exist_ok=True)
    if first.user_pcm is not None and first.assistant_pcm is not None:
        write_wav_24k(folder / "conversation0_user.wav", first.user_pcm)
        write_wav_24k(folder / "conversation0_assistant.wav", first.assistant_pcm)
    timeline = {
        "prelude_frames": first.prelude_frames,
        "facts": [d.facts for d in first.dialogues],
        "segments": [{"dialogue": s.dialogue, "speaker": s.turn.speaker, "text": s.turn.text,
                      "frames": [s.start_frame, s.end_frame]} for s in first.segments],
        "spans": [asdict(p) for p in first.placements],
    }
    (folder / "conversation0.json").write_text(json.dumps(timeline, indent=2) + "\n")


def run_recipe(checkpoint: LoadedCheckpoint, synthesizer: SpeechSynthesizer,
               config: RecipeConfig, out: Path, model_id: str, save: bool = True
               ) -> tuple[dict, RecipeData, TrainResult]:
    """Build the data, fine-tune `checkpoint.lm` in place, save it. Returns the report."""
    from app.training.trainer import wants_lora

    out = Path(out)
    data, notes = build_data(checkpoint, synthesizer, config)
    lora = wants_lora(checkpoint.lm, TrainConfig(lora=config.lora))
    tconfig = train_config(config, lora)
    write_samples(data, out / "samples")
    if data.user_code_values() <= 1:
        notes.append("the checkpoint's Mimi maps all audio to one code (untrained codebooks): "
                     "the audio streams carry no information")
    result = train(checkpoint.lm, batches(data, config.batch_size, config.seed), tconfig,
                   block=block_training_for(checkpoint))
    window = max(1, min(10, len(result.losses) // 4))
    report = {
        "model": checkpoint.manifest.id,
        "id": model_id,
        "tts": synthesizer.name,
        "device": str(checkpoint.device),
        "data": data.stats(),
        "notes": notes,
        "steps": len(result.losses),
        "lora": result.lora,
        "lora_rank": tconfig.lora_rank if result.lora else None,
        "lr": tconfig.lr,
        "trainable_params": result.trainable_params,
        "train_seconds": round(result.seconds, 2),
        "loss_first": round(result.mean_first(window), 4),
        "loss_last": round(result.mean_last(window), 4),
        "losses": [round(x, 4) for x in result.losses],
    }
    if save:
        folder, manifest_path = save_trained(
            checkpoint, result, tconfig, model_id, folder=out / "checkpoint",
            display_name=f"{checkpoint.manifest.display_name} (span recipe)")
        report.update(folder=str(folder), manifest=str(manifest_path))
    (out / "recipe.json").write_text(json.dumps(report, indent=2) + "\n")
    return report, data, result


# ---- the command: `python main.py train recipe ...` ----------------------------------------


def add_arguments(parser) -> None:
    """The `train recipe` options (registered by app.training.cli)."""
    parser.add_argument("--model", default="tiny", help="catalog id of the base checkpoint")
    parser.add_argument("--out", required=True, help="folder for the checkpoint, samples, "
                        "report (the manifest goes to the app's catalog)")
    add_options(parser, RecipeConfig)
    parser.add_argument("--lora", action="store_true", help="LoRA (default: LoRA above 100M "
                        "parameters, full fine-tuning below)")
    parser.add_argument("--full", action="store_true", help="full fine-tuning, whatever the size")
    parser.add_argument("--tts", default="espeak", help="espeak (kyutai: documented hook)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--id", default=None, help="catalog id of the result "
                        "(default MODEL-span-recipe)")


def run_from_args(args) -> dict:
    from app.checkpoints.catalog import get_manifest
    from app.checkpoints.loader import ensure_built, load_checkpoint
    from app.training.tts import make_synthesizer

    if args.lora and args.full:
        raise ValueError("--lora and --full exclude each other")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    manifest = get_manifest(args.model)
    checkpoint = load_checkpoint(manifest, ensure_built(manifest), device=device)
    config = from_args(RecipeConfig, args,
                       lora=True if args.lora else (False if args.full else None))
    report, _, _ = run_recipe(checkpoint, make_synthesizer(args.tts), config, Path(args.out),
                              args.id or f"{manifest.id}-span-recipe")
    report.pop("losses")  # in recipe.json; the printed line stays short
    return report
