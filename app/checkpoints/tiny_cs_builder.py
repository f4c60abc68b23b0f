"""Build `tiny-cs`: a random-weight checkpoint in the Context Spanning release's exact layout.

The release (`mindlogicinc/context-spanning-7b`) ships, with no config.json:
- `context_spanning_7b.pt`: a torch pickle `{"model": state_dict}` in bf16 whose key names are
  those of the PersonaPlex fork of moshi (one concatenated `self_attn.in_proj_weight` and
  `self_attn.out_proj.weight` per attention, where stock moshi has one Linear per depformer
  step) with torch.compile's `._orig_mod.` inside them;
- `voices/<name>.pt`: `{"codes": LongTensor[8, P]}`, the Mimi codes of a voice;
and takes Mimi (`tokenizer-e351c8d8-checkpoint125.safetensors`) and the text tokenizer
(`tokenizer_spm_32k_3.model`, with byte pieces at ids 4..259) from the PersonaPlex repository.
tiny-cs writes exactly those files, at a few hundred K parameters (dep_q 16), so that every
loading and engine path of the 7B runs on a CPU. Its shape is `tiny-cs` in architectures.py.

Which module carries `._orig_mod.` in the real file is not stated anywhere we could read;
only that the reference loader strips it. We put it after the two transformers (what
compiling them as submodules produces); the loader strips it wherever it is.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import torch
from moshi.models import MimiModel, loaders
from safetensors.torch import save_file

from app.checkpoints.architectures import TINY_CS_TEXT_VOCAB, tiny_cs
from app.checkpoints.tiny_builder import (
    _voice_prompt_wave,
    contiguous_state,
    initialise_codebooks,
    tiny_mimi_config,
    train_tokenizer_in_child,
)
from app.frames import FRAME_SAMPLES

RELEASE_WEIGHTS_FILE = "context_spanning_7b.pt"
MIMI_FILE = loaders.MIMI_NAME  # the PersonaPlex repository's names
TOKENIZER_FILE = loaders.TEXT_TOKENIZER_NAME
VOICES = {"f0": 1.0, "m0": 0.6}  # voice name -> pitch factor of its synthetic 'voice'
COMPILED_MODULES = ("transformer", "depformer")

_PER_STEP = re.compile(r"^(?P<prefix>.*\.self_attn)\.(?P<kind>in|out)_projs\.(?P<i>\d+)\.weight$")


def release_state_dict(lm: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The LM's weights under the release's key names, in bf16.

    Stock moshi splits each attention's projections into one Linear per step; the fork
    keeps one concatenated matrix (steps stacked on the output dimension), which stock
    moshi's load hook splits again."""
    grouped: dict[tuple[str, str], dict[int, torch.Tensor]] = {}
    out: dict[str, torch.Tensor] = {}
    for key, value in lm.state_dict().items():
        match = _PER_STEP.match(key)
        if match:
            grouped.setdefault((match["prefix"], match["kind"]), {})[int(match["i"])] = value
        else:
            out[key] = value
    for (prefix, kind), steps in grouped.items():
        stacked = torch.cat([steps[i] for i in range(len(steps))], dim=0)
        name = f"{prefix}.in_proj_weight" if kind == "in" else f"{prefix}.out_proj.weight"
        out[name] = stacked
    compiled = {}
    for key, value in out.items():
        head, _, rest = key.partition(".")
        if head in COMPILED_MODULES and rest:
            key = f"{head}._orig_mod.{rest}"
        compiled[key] = value.detach().to(torch.bfloat16).contiguous().clone()
    return dict(sorted(compiled.items()))


def _voice_codes(mimi: MimiModel, pitch: float) -> torch.Tensor:
    """The Mimi codes [8, P] of a synthetic voice (a harmonic glide at a given pitch)."""
    wave = _voice_prompt_wave()
    t = np.arange(len(wave))
    wave = np.interp(t * pitch, t, wave, right=0.0).astype(np.float32)
    pad = (-len(wave)) % FRAME_SAMPLES
    pcm = torch.from_numpy(np.concatenate([wave, np.zeros(pad, np.float32)]))[None, None]
    with torch.no_grad():
        codes = mimi.encode(pcm)  # [1, 8, P]
    return codes[0].to(torch.long).clone()


def build_tiny_cs(folder: Path, seed: int = 1234) -> Path:
    """Write tiny-cs into `folder` (replaced if present), staged so a cut-short build leaves
    nothing half-made. Returns the folder."""
    folder = Path(folder)
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)

    train_tokenizer_in_child(staging / TOKENIZER_FILE, TINY_CS_TEXT_VOCAB, seed,
                             byte_fallback=True)
    torch.manual_seed(seed)
    lm = loaders.get_moshi_lm(None, lm_kwargs=tiny_cs(), device="cpu", dtype=torch.float32)
    torch.save({"model": release_state_dict(lm)}, staging / RELEASE_WEIGHTS_FILE)

    torch.manual_seed(seed + 1)
    mimi = loaders.get_mimi(None, tiny_mimi_config(), device="cpu", num_codebooks=8)
    initialise_codebooks(mimi, torch.Generator().manual_seed(seed + 2))
    save_file(contiguous_state(mimi), str(staging / MIMI_FILE))

    voices = staging / "voices"
    voices.mkdir()
    for name, pitch in VOICES.items():
        torch.save({"codes": _voice_codes(mimi, pitch)}, voices / f"{name}.pt")

    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return folder
