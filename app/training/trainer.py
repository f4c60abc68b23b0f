"""Fine-tune a catalog checkpoint to read injected spans, in the engine's own layout.

Every training sequence comes from `span_layout.build_layout` (or, for checkpoints that read
spans as blocks, `block_layout.build_block_layout` with the reference's loss weights), so the
model learns on exactly the positions the engine feeds at inference. Tiny models are
fine-tuned in full; large ones (7B) get LoRA adapters (moshi's own `LoRALinear`), saved
beside the base weights the way moshi's loader reads them (config.json `lora`, `lora_rank`,
`lora_scaling`, `lora_name`). The result is a checkpoint folder in the real layout plus a
catalog manifest, carrying the span wrapping it was trained with, in
`<data dir>/models/<id>.json`.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from moshi.models import LMModel
from moshi.modules.lora import LoRALinear, replace_all_linear_with_lora
from safetensors.torch import save_file

from app.checkpoints.catalog import Manifest, parse_manifest, user_manifests_dir
from app.checkpoints.loader import LoadedCheckpoint, file_names
from app.checkpoints.tiny_builder import (
    CONFIG_FILE,
    MIMI_CONFIG_FILE,
    MOSHI_FILE,
    RANDOM_WEIGHTS_MARKER,
)
from app.engine.span_text import SpanTokenizer
from app.moshi_internals import moshi_7b_config
from app.paths import checkpoints_dir
from app.training.block_layout import BlockTraining
from app.training.span_layout import SpanInsert, SpanLayout, build_layout

LORA_FILE = "lora.safetensors"
FULL_FINETUNE_MAX_PARAMS = 100_000_000  # above this, LoRA: a 7B does not fit full FT + Adam


@dataclass(frozen=True)
class TrainingExample:
    """One conversation: aligned codes, the spans injected into it, the frames to learn."""

    codes: torch.Tensor  # [17, T] long, aligned as in span_layout (blocks: block_layout)
    spans: tuple[SpanInsert, ...]
    answer_frames: torch.Tensor | None = None  # [T] bool; None: every frame
    prefix: torch.Tensor | None = None  # [17, P] forced start, no loss (block layout only)

    def answer_frame_count(self) -> int:
        """How many frames the answer loss reads."""
        if self.answer_frames is None:
            return self.codes.shape[-1]
        return int(self.answer_frames.sum())


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 60
    batch_size: int = 4
    lr: float = 3e-3
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    audio_loss_weight: float = 0.0  # > 0: also train the depformer on answer frames
    lora: bool | None = None  # None: LoRA above FULL_FINETUNE_MAX_PARAMS, full FT below
    lora_rank: int = 16
    lora_scaling: float = 2.0
    seed: int = 0


@dataclass
class TrainResult:
    losses: list[float] = field(default_factory=list)  # text cross-entropy per step
    audio_losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    lora: bool = False
    trainable_params: int = 0

    def mean_first(self, n: int) -> float:
        return sum(self.losses[:n]) / max(1, len(self.losses[:n]))

    def mean_last(self, n: int) -> float:
        return sum(self.losses[-n:]) / max(1, len(self.losses[-n:]))


def stack_layouts(layouts: Sequence[SpanLayout], zero_token_id: int) -> SpanLayout:
    """Batch layouts of different lengths by padding at the END: a causal model's earlier
    positions never see the padding, and the padding has no loss and embeds to zero."""
    length = max(layout.inputs.shape[2] for layout in layouts)

    def pad(t: torch.Tensor, value: int | bool) -> torch.Tensor:
        return F.pad(t, (0, length - t.shape[-1]), value=value)

    return SpanLayout(
        inputs=torch.cat([pad(x.inputs, zero_token_id) for x in layouts]),  # [B, 17, S]
        targets=torch.cat([pad(x.targets, zero_token_id) for x in layouts]),  # [B, 17, S]
        frame_positions=layouts[0].frame_positions,  # per-example; not used once batched
        span_mask=pad(layouts[0].span_mask, False),
        text_loss_mask=torch.cat([pad(x.text_loss_mask, False) for x in layouts]),  # [B, S]
        audio_loss_mask=torch.cat([pad(x.audio_loss_mask, False) for x in layouts]),
    )


def layout_losses(
    lm: LMModel, layout: SpanLayout, audio: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Text cross-entropy on the layout's text mask; depformer cross-entropy on its audio mask.

    ONE forward of the temporal transformer over the whole sequence, as at inference."""
    device = lm.device
    inputs = layout.inputs.to(device)  # [B, 17, S]
    targets = layout.targets.to(device)  # [B, 17, S]
    text_mask = layout.text_loss_mask.to(device)  # [B, S]
    transformer_out, text_logits = lm.forward_text(inputs)  # [B, S, dim], [B, 1, S, card]
    text_loss = F.cross_entropy(text_logits[:, 0][text_mask].float(), targets[:, 0][text_mask])
    if not audio:
        return text_loss, None
    audio_mask = layout.audio_loss_mask.to(device)  # [B, dep_q, S]
    # The depformer is teacher-forced on the targets (text, then earlier codebooks).
    logits = lm.forward_depformer_training(targets, transformer_out)  # [B, dep_q, S, card]
    audio_targets = targets[:, lm.audio_offset : lm.audio_offset + lm.dep_q]  # [B, dep_q, S]
    audio_loss = F.cross_entropy(logits[audio_mask].float(), audio_targets[audio_mask])
    return text_loss, audio_loss


def wants_lora(lm: LMModel, config: TrainConfig) -> bool:
    if config.lora is not None:
        return config.lora
    return sum(p.numel() for p in lm.parameters()) > FULL_FINETUNE_MAX_PARAMS


def add_lora(lm: LMModel, rank: int, scaling: float) -> list[torch.Tensor]:
    """moshi's LoRA on every linear layer; only the adapters train. Returns them.

    lora_B starts at zero so the adapted model starts exactly as the base one."""
    replace_all_linear_with_lora(lm, rank, scaling)
    for param in lm.parameters():
        param.requires_grad_(False)
    trainable = []
    for module in lm.modules():
        if isinstance(module, LoRALinear):
            torch.nn.init.kaiming_uniform_(module.lora_A.weight, a=math.sqrt(5))
            torch.nn.init.zeros_(module.lora_B.weight)
            for p in (module.lora_A.weight, module.lora_B.weight):
                p.requires_grad_(True)
                trainable.append(p)
    return trainable


def lora_state(lm: LMModel) -> dict[str, torch.Tensor]:
    """Only the adapters, under the keys moshi's get_lora_moshi loads."""
    return {
        k: v.detach().contiguous().clone()
        for k, v in lm.state_dict().items()
        if ".lora_A." in k or ".lora_B." in k
    }


def train(
    lm: LMModel,
    batches: Iterator[list[TrainingExample]],
    config: TrainConfig,
    on_step: Callable[[int, float], None] | None = None,
    block: BlockTraining | None = None,
) -> TrainResult:
    """Train `lm` in place for config.steps batches. LoRA adapters are added when chosen.

    `block` (`block_layout.block_training_for`): a checkpoint that reads spans as blocks is
    trained in the block layout with the reference's loss weights; otherwise span_layout."""
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)  # the block layout's windows
    result = TrainResult(lora=wants_lora(lm, config))
    if result.lora:
        params = add_lora(lm, config.lora_rank, config.lora_scaling)
    else:
        params = [p for p in lm.parameters()]
        for p in params:
            p.requires_grad_(True)
    result.trainable_params = sum(p.numel() for p in params)
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    audio = config.audio_loss_weight > 0
    lm.train()
    start = time.perf_counter()
    for step in range(config.steps):
        examples = next(batches)
        if block is None:
            layouts = [
                build_layout(lm, ex.codes[None], ex.spans,
                             None if ex.answer_frames is None else ex.answer_frames[None], audio)
                for ex in examples
            ]
            text_loss, audio_loss = layout_losses(lm, stack_layouts(layouts, lm.zero_token_id),
                                                  audio)
        else:
            layouts = [block.layout(lm, ex.codes, ex.spans, ex.answer_frames, ex.prefix, audio,
                                    rng) for ex in examples]
            text_loss, audio_loss = block.losses(lm, stack_layouts(layouts, lm.zero_token_id),
                                                 audio)
        loss = text_loss
        if audio_loss is not None:
            loss = loss + config.audio_loss_weight * audio_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
        optimizer.step()
        result.losses.append(float(text_loss.detach()))
        if audio_loss is not None:
            result.audio_losses.append(float(audio_loss.detach()))
        if on_step is not None:
            on_step(step, result.losses[-1])
    lm.eval()
    for p in lm.parameters():
        p.requires_grad_(False)
    result.seconds = time.perf_counter() - start
    return result


# ---- the synthetic task: answer from the span ---------------------------------------------

SYNTHETIC_WORDS = (
    "red", "blue", "green", "amber", "violet", "canberra", "berlin", "lima", "oslo", "seven",
    "twelve", "ninety", "friday", "monday", "river", "mountain", "window", "lantern", "copper",
)


def synthetic_batches(
    checkpoint: LoadedCheckpoint, batch_size: int, frames: int = 24, seed: int = 0
) -> Iterator[list[TrainingExample]]:
    """Conversations where a span (a few random words, in the manifest's wrapping) lands
    mid-conversation and the model's text stream then says its words, one per frame.

    Learning it needs the model to read the span: the words differ every time. The text
    loss is on the answer frames only; audio codes are random (no audio loss here)."""
    lm = checkpoint.lm
    manifest = checkpoint.manifest
    tokenizer = SpanTokenizer(
        checkpoint.tokenizer, manifest.span_wrapping, manifest.max_span_tokens
    )
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    pad = lm.text_padding_token_id
    while True:
        batch = []
        for _ in range(batch_size):
            text = " ".join(rng.sample(SYNTHETIC_WORDS, 3))
            span = SpanInsert.from_text(tokenizer, text, rng.randint(2, frames // 3))
            answer_ids = tokenizer.encode(text).content_ids[: frames - span.frame]
            codes = torch.randint(0, lm.card, (lm.num_codebooks, frames), generator=generator)
            codes[0] = pad  # [17, T]: silence in the text stream...
            end = span.frame + len(answer_ids)
            codes[0, span.frame : end] = torch.tensor(answer_ids)  # ...then the answer
            answer = torch.zeros(frames, dtype=torch.bool)
            answer[span.frame : end + 1] = True  # the words and the pad that ends them
            batch.append(TrainingExample(codes, (span,), answer))
        yield batch


# ---- saving what the app's loader loads ---------------------------------------------------


def _link_or_copy(src: Path, dst: Path) -> None:
    """A hard link when the file system allows (7B weights are 15 GB), else a copy."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _base_config(checkpoint: LoadedCheckpoint) -> dict:
    """The base's config.json; for a legacy folder (no config.json: Moshi 7B), moshi's own
    7B configuration naming the folder's files, so the result always has one."""
    info = checkpoint.info
    if info.raw_config is None and checkpoint.manifest.architecture is not None:
        # Bare weights of a named architecture (PersonaPlex, the Context Spanning release):
        # the architecture becomes the result's config.json, Mimi's shape a file beside it.
        config = dict(info.lm_config or {}) | {
            "moshi_name": MOSHI_FILE,  # the trained weights; the base's is a pickle
            "mimi_name": Path(info.mimi_weights).name,
            "tokenizer_name": Path(info.tokenizer).name,
            "model_type": "moshi",
        }
        if info.mimi_config is not None:
            config["mimi_config_name"] = MIMI_CONFIG_FILE
        return config
    if info.raw_config is None:
        return moshi_7b_config() | {
            "moshi_name": Path(info.moshi_weights).name,
            "mimi_name": Path(info.mimi_weights).name,
            "tokenizer_name": Path(info.tokenizer).name,
            "model_type": "moshi",
        }
    if info.raw_config.get(RANDOM_WEIGHTS_MARKER):
        raise ValueError("a random-weight checkpoint has no weights on disk to train from")
    if info.raw_config.get("lora"):
        raise ValueError("training on top of a LoRA checkpoint is not supported yet")
    return dict(info.raw_config)


def manifest_json(base: Manifest, model_id: str, folder: Path, display_name: str,
                  notes: str) -> dict:
    """The base checkpoint's manifest, now a local folder trained on its span wrapping.

    Everything else (generator, span placement, retrieval trigger, conversation start,
    sampling) is the base's, as written in its manifest. The folder holds a config.json, so
    the base's named architecture and per-file repositories no longer apply."""
    raw = json.loads(json.dumps(base.raw))  # a deep copy of plain JSON
    raw.pop("architecture", None)
    raw.update({
        "id": model_id,
        "display_name": display_name,
        "source": {"kind": "local", "folder": str(folder)},
        "span_wrapping": dict(raw.get("span_wrapping") or {}) | {"trained": True},
        "notes": notes,
        "trained_from": base.id,
    })
    return raw


def save_trained(
    checkpoint: LoadedCheckpoint,
    result: TrainResult,
    config: TrainConfig,
    model_id: str,
    folder: Path | None = None,
    display_name: str | None = None,
) -> tuple[Path, Path]:
    """Write the trained checkpoint in the real layout and its manifest. Returns both paths.

    Full FT: new weights, Mimi/tokenizer/voices linked from the base. LoRA: the base weights
    linked, the adapters in lora.safetensors, config.json naming them as moshi expects."""
    base_config = _base_config(checkpoint)
    folder = Path(folder) if folder is not None else checkpoints_dir() / model_id
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    names = file_names(base_config)
    base_folder = checkpoint.folder
    for role, name in names.items():
        if role == "mimi_config" and not (base_folder / name).is_file():  # a named shape
            (staging / name).write_text(json.dumps(checkpoint.info.mimi_config, indent=2) + "\n")
        elif role not in ("moshi", "lora"):
            _link_or_copy(base_folder / name, staging / name)
    voices = checkpoint.manifest.conversation_start.voices_dir  # persona voice prompts
    if (base_folder / voices).is_dir():
        shutil.copytree(base_folder / voices, staging / voices,
                        copy_function=lambda src, dst: _link_or_copy(Path(src), Path(dst)))
    ck_config = {k: v for k, v in base_config.items() if k != "lora_name"}
    lm = checkpoint.lm
    if result.lora and checkpoint.info.raw_config is None and checkpoint.manifest.architecture:
        raise ValueError("LoRA adapters on bare release weights cannot be saved yet: moshi's "
                         "loader cannot read the base's weight file (train in full)")
    if result.lora:
        _link_or_copy(base_folder / names["moshi"], staging / names["moshi"])
        save_file(lora_state(lm), str(staging / LORA_FILE))
        ck_config.update(lora=True, lora_rank=config.lora_rank, lora_scaling=config.lora_scaling,
                         lora_name=LORA_FILE)
    else:
        state = {k: v.detach().contiguous().clone() for k, v in lm.state_dict().items()}
        save_file(state, str(staging / MOSHI_FILE))
        ck_config.update(moshi_name=MOSHI_FILE)
        for key in ("lora", "lora_rank", "lora_scaling"):
            ck_config.pop(key, None)
    ck_config["model_id"] = {
        "sig": f"contextspan-{model_id}",
        "trained_from": checkpoint.manifest.id,
        "steps": len(result.losses),
    }
    (staging / CONFIG_FILE).write_text(json.dumps(ck_config, indent=2) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)

    kind = "LoRA" if result.lora else "full"
    raw = manifest_json(
        checkpoint.manifest, model_id, folder,
        display_name or f"{checkpoint.manifest.display_name} (span-trained)",
        f"Fine-tuned from {checkpoint.manifest.id} on span-injected conversations in the "
        f"engine's layout ({kind}, {len(result.losses)} steps, lr {config.lr}).",
    )
    parse_manifest(raw, origin=model_id)  # fail here, not in the catalog later
    manifests = user_manifests_dir()
    manifests.mkdir(parents=True, exist_ok=True)
    manifest_path = manifests / f"{model_id}.json"
    manifest_path.write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    return folder, manifest_path
