"""`python main.py bench engine`: the one-row engine's cost per frame, through a real
conversation (its thread, its queues, its events), and, beside another checkout of
ContextSpan (`--baseline-tree DIR`, e.g. `git worktree add /tmp/base <commit>`), the same
conversation on that tree's engine, in the same run: the two alternate, round by round, so
a busy machine slows both alike, and the ratio of their medians is printed.

Each measurement is a child process on one torch thread (`OMP_NUM_THREADS=1`) that loads
the model, opens one conversation (greedy, fixed chunk limit, seed 0), queues spans at fixed
frames and `frames` frames of noise as fast as the engine takes them, and times from the
first frame handed in to the last frame out: `frame_ms` = that over the frames (Mimi
encode, the step, Mimi decode, the span reads, the events, the hand-offs). The child also
hashes what the conversation produced (every event without its clocks, the PCM's bytes
included, and every column the transformer was fed): `same_as_baseline` says whether the
two trees' engines gave the very same conversation.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from app.paths import REPO_ROOT

SPANS = {3: "the capital of australia is canberra", 10: "first of two", 11: "second",
         40: "a longer span " * 6}

INCLUDES = {
    "frame_ms": "a conversation's frames fed as fast as its engine takes them: from the "
                "first frame handed in to the last frame out, over the frames (Mimi "
                "encode, the step, Mimi decode, span reads, events and hand-offs); the "
                "median over the rounds, each round a child process on one torch thread",
    "ratio": "frame_ms of this tree over the baseline tree's (< 1: this tree is faster)",
    "same_as_baseline": "the two trees' conversations hash alike: every event (clocks "
                        "left out, PCM bytes in) and every column fed to the transformer",
}

# Runs in the child, on either tree's engine (this one's LocalEngine, or the DuplexEngine
# that came before it), so the same conversation is measured on both.
_DRIVER = r"""
import hashlib, json, os, sys, time
import numpy as np
model, frames, spans = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import ensure_built, load_checkpoint
from app.engine import events as ev
from app.frames import FRAME_SAMPLES
manifest = get_manifest(model)
ck = load_checkpoint(manifest, ensure_built(manifest), device="cpu")
fed = hashlib.sha256()
original = ck.lm.forward_text
def record(sequence, *args):
    fed.update(np.ascontiguousarray(sequence[0].numpy()).tobytes())
    return original(sequence, *args)
ck.lm.forward_text = record
options = dict(seed=0, greedy=True, chunk_limit=8, input_queue_frames=frames + 1)
if os.path.exists(os.path.join(sys.argv[4], "app", "engine", "local_engine.py")):
    from app.engine.local_engine import open_conversation
    from app.engine.speech_engine import EngineOptions
    engine = open_conversation(ck, EngineOptions(**options))
else:
    from app.engine.duplex_engine import DuplexEngine, EngineOptions
    engine = DuplexEngine(ck, EngineOptions(**options))
for frame, text in spans.items():
    engine.inject(text, "bench", at_frame=int(frame))
rng = np.random.default_rng(0)
pcm = [rng.normal(0, 0.1, FRAME_SAMPLES).astype(np.float32) for _ in range(frames)]
engine.start()
while True:  # the warm-up is not timed: wait for the conversation to be ready
    event = engine.events.get(timeout=600)
    if isinstance(event, ev.EngineReady):
        break
fed = hashlib.sha256()
events = hashlib.sha256()
start = time.perf_counter()
for chunk in pcm:
    engine.push_frame(chunk, timeout=60)
engine.finish_input(timeout=60)
last = start
while True:
    event = engine.events.get(timeout=600)
    if isinstance(event, ev.AudioOut):
        last = time.perf_counter()
        events.update(event.pcm.tobytes())
    elif isinstance(event, ev.EngineStopped):
        break
    elif not isinstance(event, (ev.FrameStats, ev.BlockSlot)):
        fields = {k: v for k, v in vars(event).items() if k not in ("monotonic_s", "prefill_ms")}
        events.update(repr((type(event).__name__, sorted(fields.items()))).encode())
engine.stop()
print(json.dumps({"frame_ms": (last - start) * 1000.0 / frames,
                  "digest": events.hexdigest() + fed.hexdigest()}))
"""


def _measure(tree: Path, model: str, frames: int, data_dir: str | None) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tree)}
    if data_dir:
        env["CONTEXTSPAN_DATA_DIR"] = data_dir
    result = subprocess.run(
        [sys.executable, "-c", _DRIVER, model, str(frames), json.dumps(SPANS), str(tree)],
        cwd=tree, env=env, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"the engine bench on {tree} failed: "
                           f"{result.stderr.strip().splitlines()[-1:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_engine_bench(models: tuple[str, ...] = ("tiny", "tiny-cs"), frames: int = 200,
                     rounds: int = 3, baseline_tree: Path | None = None) -> dict[str, Any]:
    if frames < 50 or rounds < 1:
        raise ValueError("the engine bench needs at least 50 frames and one round")
    if baseline_tree is not None and not (baseline_tree / "app" / "engine").is_dir():
        raise ValueError(f"{baseline_tree} is not a checkout of ContextSpan (no app/engine)")
    data_dir = os.environ.get("CONTEXTSPAN_DATA_DIR")
    rows = []
    for model in models:
        ours: list[float] = []
        theirs: list[float] = []
        digests: set[str] = set()
        baseline_digests: set[str] = set()
        for _ in range(rounds):  # alternate: a busy moment slows both trees alike
            run = _measure(REPO_ROOT, model, frames, data_dir)
            ours.append(run["frame_ms"])
            digests.add(run["digest"])
            if baseline_tree is not None:
                base = _measure(baseline_tree, model, frames, data_dir)
                theirs.append(base["frame_ms"])
                baseline_digests.add(base["digest"])
        row: dict[str, Any] = {"model": model, "frames": frames, "rounds": rounds,
                               "frame_ms": round(statistics.median(ours), 3),
                               "frame_ms_rounds": [round(ms, 3) for ms in ours],
                               "repeatable": len(digests) == 1}
        if baseline_tree is not None:
            row["baseline_frame_ms"] = round(statistics.median(theirs), 3)
            row["baseline_frame_ms_rounds"] = [round(ms, 3) for ms in theirs]
            row["ratio"] = round(statistics.median(ours) / statistics.median(theirs), 3)
            row["same_as_baseline"] = digests == baseline_digests and len(digests) == 1
        rows.append(row)
    return {"bench": "engine", "tree": str(REPO_ROOT),
            "baseline_tree": None if baseline_tree is None else str(baseline_tree),
            "torch_threads": 1, "rows": rows, "includes": INCLUDES}


def describe(result: dict[str, Any]) -> str:
    lines = [f"one-row engine, one torch thread: {result['tree']}"
             + (f" against {result['baseline_tree']}" if result["baseline_tree"] else "")]
    for row in result["rows"]:
        line = f"  {row['model']:>8}: {row['frame_ms']:.2f} ms a frame"
        if "ratio" in row:
            line += (f", baseline {row['baseline_frame_ms']:.2f} ms, ratio {row['ratio']:.3f}, "
                     f"same conversation {row['same_as_baseline']}")
        lines.append(line)
    return "\n".join(lines)
