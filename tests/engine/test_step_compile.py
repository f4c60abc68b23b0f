"""The engine's step compiled by torch.compile (EngineOptions.compile_step, `--compile`: the
temporal forward's setup, one layer for all, its end; the depformer's codebook step): greedy
tokens identical to the uncompiled step's on tiny and tiny-cs, frame for frame,
teacher-forced frames included; in bf16, the compiled logits within bf16's rounding of the
uncompiled ones; the warm-up says it is compiling, each piece as it is through, then that
it compiled; a second start reads inductor's cache in the data dir; a piece that cannot
compile runs uncompiled, and says why; once settled, a call its compiled graphs do not fit
runs uncompiled instead of compiling mid-conversation.

Compiling takes tens of seconds on a busy 2-core CPU: each model's compiled engine is made
once for the module.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from app.engine.depformer_step import DepformerSteps, codebook_step
from app.engine.lm_runtime import Sampling
from app.engine.local_engine import LocalEngine
from app.engine.speech_engine import EngineOptions
from app.engine.step_compile import StepCompile

pytestmark = pytest.mark.slow
REPO_ROOT = Path(__file__).resolve().parents[2]
FRAMES = 10
FORCED = range(2, 5)  # frames whose model codes (and text) are given: teacher forcing
PIECES = ["temporal step's setup", "temporal layer", "temporal step's end", "depformer step"]


def _run(checkpoint, compile_step: bool) -> tuple[list[np.ndarray | None], LocalEngine,
                                                  list[str]]:
    """FRAMES greedy steps of a one-row engine, driven without its thread."""
    said: list[str] = []
    engine = LocalEngine(checkpoint, 1, EngineOptions(greedy=True, compile_step=compile_step,
                                                      warmup_notice=said.append))
    engine.prepare_placeholders()
    users = np.random.default_rng(7).integers(0, int(checkpoint.lm.card), (FRAMES, 1, 8))
    # The model's codes given for FORCED frames: the forcing generator's 8 (and its text),
    # stock moshi's dep_q (`depformer_replace_tokens`; it cannot force the text).
    forcing = checkpoint.manifest.generator == "forcing"
    agent = [int(c) for c in np.random.default_rng(8).integers(
        0, int(checkpoint.lm.card), 8 if forcing else checkpoint.lm.dep_q)]
    outs = []
    with engine.runtime.streaming(1, 16), torch.no_grad():
        engine.runtime.reset_row(0)
        for frame in range(FRAMES):
            forced = frame in FORCED
            outs.append(engine.step_rows(
                [0], users[frame], [3 if forced and forcing else None],
                [agent] if forced else None)[0])
    return outs, engine, said


@pytest.fixture(scope="module", params=["tiny", "tiny-cs"])
def compiled_and_not(request, tiny_folder, tiny_cs_folder):
    from app.checkpoints.catalog import get_manifest
    from app.checkpoints.loader import load_checkpoint

    model = request.param
    folder = tiny_cs_folder if model == "tiny-cs" else tiny_folder
    checkpoint = load_checkpoint(get_manifest(model), folder, device="cpu")
    eager = _run(checkpoint, compile_step=False)
    compiled = _run(replace(checkpoint), compile_step=True)
    return model, eager, compiled


def test_compiled_greedy_tokens_equal_the_uncompiled_ones(compiled_and_not):
    model, (eager, _engine, _said), (compiled, engine, _said2) = compiled_and_not
    pieces = engine.runtime.compiled_pieces()
    assert [p.label for p in pieces] == PIECES
    for piece in pieces:  # compiled indeed, not quietly uncompiled
        assert piece.compiled, (piece.label, piece.failure)
    assert sum(out is not None for out in eager) >= FRAMES - 2  # the delays filled
    for frame, (a, b) in enumerate(zip(eager, compiled, strict=True)):
        assert (a is None) == (b is None), (model, frame)
        if a is not None:
            assert np.array_equal(a, b), (model, frame, a, b)


def test_the_warm_up_says_it_is_compiling_then_that_it_compiled(compiled_and_not):
    _model, (_eager, _engine, uncompiled_said), (_compiled, _engine2, said) = compiled_and_not
    assert uncompiled_said == []
    assert said[0].startswith("Compiling the speech model's step for cpu with torch.compile, "
                              "4 pieces")
    assert len(said) == 6, said
    through = [m.split(" (")[0].removeprefix("Compiled the ") for m in said[1:-1]]
    assert sorted(through) == sorted(PIECES), said
    assert said[-1].startswith("The speech model's step is ")
    assert "4 of 4 pieces" in said[-1], said


def test_once_settled_a_call_its_graphs_do_not_fit_runs_uncompiled(compiled_and_not):
    """Two rows where it compiled for one: the answer is the uncompiled one's, and nothing
    compiled mid-conversation (no new graph)."""
    from torch._dynamo.utils import counters

    _model, _eager, (_compiled, engine, _said) = compiled_and_not
    piece = engine.runtime.compiled_pieces()[-1]
    assert piece.label == "depformer step"
    lm = engine.checkpoint.lm
    graphs = counters["stats"]["unique_graphs"]
    steps = DepformerSteps(lm, Sampling(greedy=True), 2, piece)
    plain = DepformerSteps(lm, Sampling(greedy=True), 2)
    args = (torch.tensor([3, 4]), torch.randn(2, 1, lm.dim),
            torch.zeros(2, lm.dep_q, dtype=torch.long), torch.zeros(2, lm.dep_q, dtype=bool))
    with torch.no_grad():
        assert torch.equal(steps(*args), plain(*args))
    assert counters["stats"]["unique_graphs"] == graphs


def test_a_second_start_reads_the_compile_cache(compiled_and_not, data_dir):
    """A new process compiling the same step finds inductor's graphs in the data dir."""
    model = compiled_and_not[0]
    cache = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    assert any(Path(cache).iterdir())
    script = (
        "import numpy as np, torch\n"
        "from app.checkpoints.catalog import get_manifest\n"
        "from app.checkpoints.loader import load_checkpoint\n"
        "from app.engine.local_engine import LocalEngine\n"
        "from app.engine.speech_engine import EngineOptions\n"
        f"ck = load_checkpoint(get_manifest({model!r}), device='cpu')\n"
        "engine = LocalEngine(ck, 1, EngineOptions(greedy=True, compile_step=True))\n"
        "engine.prepare_placeholders()\n"
        "with engine.runtime.streaming(1, 16), torch.no_grad():\n"
        "    engine.runtime.reset_row(0)\n"
        "    for _ in range(4):  # past the forcing generator's seeding frame\n"
        "        engine.step_rows([0], np.zeros((1, 8), dtype=np.int64), [None])\n"
        "group = engine.runtime.step_compile()\n"
        "print('compiled', all(p.compiled for p in group.pieces), 'from_cache',\n"
        "      group.from_cache)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=600,
                          env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)})
    assert done.returncode == 0, done.stderr
    assert "compiled True from_cache True" in done.stdout, done.stdout + done.stderr


def test_a_piece_that_cannot_compile_runs_uncompiled_and_says_why():
    def untraceable(x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()  # one graph cannot hold it
        return x * 2

    said: list[str] = []
    piece = StepCompile(torch.device("cpu"), said.append).piece(untraceable, "test piece",
                                                                "depformer")
    assert torch.equal(piece(torch.ones(3)), torch.full((3,), 2.0))
    piece.settle()
    assert not piece.compiled and piece.failure is not None
    assert said[-1].startswith("The test piece runs uncompiled: torch.compile failed")
    assert torch.equal(piece(torch.ones(2)), torch.full((2,), 2.0))


def test_bf16_compiled_logits_are_the_uncompiled_ones_to_bf16_rounding(tiny_folder):
    """tiny's depformer in bf16, every codebook given (both sides take the same path)."""
    from app.checkpoints.catalog import get_manifest
    from app.checkpoints.loader import load_checkpoint

    lm = load_checkpoint(get_manifest("tiny"), tiny_folder, device="cpu",
                         dtype=torch.bfloat16).lm
    piece = StepCompile(torch.device("cpu")).piece(codebook_step, "depformer step", "depformer")
    compiled = DepformerSteps(lm, Sampling(greedy=True), 1, piece)
    plain = DepformerSteps(lm, Sampling(greedy=True), 1)
    compiled.logits, plain.logits = [], []
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _frame in range(3):
            args = (torch.randint(0, 50, (1,), generator=generator),
                    torch.randn(1, 1, lm.dim, generator=generator).to(torch.bfloat16),
                    torch.randint(0, lm.card, (1, lm.dep_q), generator=generator),
                    torch.ones(1, lm.dep_q, dtype=torch.bool))
            plain(*args)
            compiled(*args)
            piece.settle()
    assert piece.compiled, piece.failure
    assert len(compiled.logits) == len(plain.logits) == 3 * lm.dep_q
    for step, (fused, eager) in enumerate(zip(compiled.logits, plain.logits, strict=True)):
        eager, fused = eager.float(), fused.float()
        scale = float(eager.abs().max())  # two units of bf16's last place, at the largest
        torch.testing.assert_close(fused, eager, rtol=0.0, atol=2 * 2**-8 * scale,
                                   msg=f"codebook step {step % lm.dep_q}")
