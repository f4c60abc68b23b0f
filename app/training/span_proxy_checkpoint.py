"""The span-reading proxy's trained LM, saved as a checkpoint in the real on-disk layout.

The tiny catalog checkpoint's layout (app/checkpoints/tiny_builder.py): config.json naming
the files, the LM's weights in `model.safetensors`, Mimi's weights and config, the
SentencePiece tokenizer. Mimi and the tokenizer are the tiny checkpoint's (the proxy was
trained with that tokenizer); the LM is the trained one, with its own architecture in
config.json (the tiny's with a smaller context). So the app's loader reads it as it reads
any checkpoint, and the MLX engine's converter (app/engine/mlx/weights.py) converts it:
the proxy's MLX evaluation runs the model from these files, not from memory.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from moshi.models import LMModel
from safetensors.torch import save_file

from app.checkpoints.loader import file_names
from app.checkpoints.tiny_builder import CONFIG_FILE, MOSHI_FILE, contiguous_state


def save_proxy_checkpoint(lm: LMModel, lm_config: dict, base_folder: Path, folder: Path,
                          model_id: dict) -> Path:
    """Write `lm` (built from `lm_config`) with the base checkpoint's Mimi and tokenizer
    into `folder` (replaced if present). It is written to a staging folder first, so a save
    cut short leaves nothing half-made. `model_id`: config.json's record of what this is."""
    base_folder, folder = Path(base_folder), Path(folder)
    base_config = json.loads((base_folder / CONFIG_FILE).read_text(encoding="utf-8"))
    names = file_names(base_config)
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for role in ("mimi", "mimi_config", "tokenizer"):
        if role in names:
            shutil.copyfile(base_folder / names[role], staging / names[role])
    save_file(contiguous_state(lm), str(staging / MOSHI_FILE))
    config = dict(lm_config) | {
        "moshi_name": MOSHI_FILE,
        "mimi_name": names["mimi"],
        "tokenizer_name": names["tokenizer"],
        "model_type": "moshi",
        "model_id": model_id,
    }
    if "mimi_config" in names:
        config["mimi_config_name"] = names["mimi_config"]
    (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return folder
