"""The span fine-tuning recipe, end to end on the tiny checkpoint: spoken dialogues (espeak-ng),
Mimi codes, spans in the engine's layout, a few training steps, a checkpoint the app loads."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from app.checkpoints.catalog import get_manifest, load_user_manifests
from app.checkpoints.loader import load_checkpoint
from app.frames import FRAME_SAMPLES
from app.training.cli import main_train
from app.training.dialogues import clock_words, make_dialogues, number_words
from app.training.recipe import RecipeConfig, run_recipe
from app.training.span_layout import build_layout
from app.training.trainer import layout_losses
from app.training.tts import EspeakSynthesizer


@pytest.fixture()
def own_data_dir(tmp_path, monkeypatch, tiny_folder):
    """Trained models go to a private data dir (the tiny checkpoint linked into it)."""
    data = tmp_path / "data"
    (data / "checkpoints").mkdir(parents=True)
    (data / "checkpoints" / "tiny").symlink_to(tiny_folder)
    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(data))
    return data


def _give_mimi_a_codebook(mimi, pcm: np.ndarray) -> None:
    """The tiny Mimi's codebooks are untrained (all zero): every frame encodes to code 0.
    Seed its first codebook with latents of real speech so that codes follow the audio."""
    codebook = mimi.quantizer.rvq_first.vq.layers[0]._codebook
    seen = []
    original = codebook.encode

    def capture(x):
        seen.append(x.detach().reshape(-1, x.shape[-1]).clone())
        return original(x)

    codebook.encode = capture
    with torch.no_grad():
        mimi.encode(torch.from_numpy(pcm)[None, None])
    del codebook.encode
    latents = torch.cat(seen)  # [frames, dim]
    picks = torch.linspace(0, latents.shape[0] - 1, codebook.embedding_sum.shape[0]).long()
    codebook.embedding_sum.copy_(latents[picks])
    codebook.cluster_usage.fill_(1.0)
    codebook._initialized.fill_(1.0)
    codebook._cached_initialized = False
    codebook._embedding = None  # moshi caches embedding_sum / cluster_usage


def test_spoken_numbers():
    assert number_words(314) == "three hundred fourteen"
    assert clock_words(7, 40) == "seven forty"
    assert clock_words(9, 5) == "nine oh five"
    dialogue = make_dialogues(1, seed=3)[0]
    assert dialogue.facts and dialogue.turns[dialogue.question_index].speaker == "user"


def test_espeak_word_timings_from_its_events():
    synth = EspeakSynthesizer()
    user = synth.synthesize("When does the train leave?", "user")
    assistant = synth.synthesize("It leaves at seven forty.", "assistant")
    assert user.timing == assistant.timing == "events"
    assert [w.word for w in assistant.words] == ["It", "leaves", "at", "seven", "forty."]
    starts = [w.start_s for w in assistant.words]
    assert starts == sorted(starts) and starts[-1] < assistant.seconds
    assert not np.allclose(user.pcm[:2000], assistant.pcm[:2000])  # two voices


def test_recipe_end_to_end_on_the_tiny_checkpoint(tiny_folder, own_data_dir, tmp_path):
    ck = load_checkpoint(get_manifest("tiny"), tiny_folder, device="cpu")
    lm = ck.lm
    synth = EspeakSynthesizer()
    speech = synth.synthesize("Which gate is Ana flying from? Seat twelve A.", "user").pcm
    _give_mimi_a_codebook(ck.mimi, speech)
    config = RecipeConfig(dialogues=3, max_per_conversation=3, steps=3, batch_size=2, seed=1)
    report, data, result = run_recipe(ck, synth, config, tmp_path / "out", "tiny-recipe-test")

    # Data: conversations on one timeline, both sides encoded, spans placed before answers.
    assert report["data"]["dialogues"] == 3 and report["data"]["spans"] == 3
    assert report["data"]["word_timing"] == {"events": report["data"]["word_timing"]["events"]}
    pad = lm.text_padding_token_id
    for conv in data.conversations:
        codes = conv.example.codes  # [17, T]
        assert codes.shape[0] == lm.num_codebooks
        user = codes[1 + lm.dep_q]  # the user's first codebook
        spoken = torch.zeros(codes.shape[1], dtype=torch.bool)
        for seg in conv.segments:
            if seg.turn.speaker == "user":
                spoken[seg.start_frame + 1 : seg.end_frame - 1] = True
        assert torch.unique(user[spoken]).numel() > 1, "user codes do not follow the speech"
        assert set(user[spoken].tolist()) != set(user[~spoken].tolist())
        text = codes[0]
        answer = conv.example.answer_frames
        assert answer.any() and (text[answer] != pad).any()
        for seg in conv.segments:  # every assistant word starts inside its turn
            if seg.turn.speaker == "assistant" and seg.turn.answer:
                assert seg.first_text_frame >= seg.start_frame
                assert answer[seg.first_text_frame : seg.last_text_frame + 1].all()
            if seg.turn.speaker == "user":  # the text stream is the assistant's own
                assert (text[seg.start_frame : seg.end_frame] == pad).sum() > 0
        for placement, span in zip(conv.placements, conv.example.spans, strict=True):
            assert span.frame == placement.frame <= placement.answer_frame
            assert not placement.truncated

        # The layout puts each span in as text-only columns, no loss on them.
        layout = build_layout(lm, codes[None], conv.example.spans, answer[None])
        total = sum(len(s.ids) for s in conv.example.spans)
        assert int(layout.span_mask.sum()) == total
        assert layout.inputs.shape[-1] == codes.shape[-1] + total
        assert (layout.inputs[0, 1:, layout.span_mask] == lm.zero_token_id).all()
        assert not layout.text_loss_mask[0, layout.span_mask].any()
        masked_frames = layout.text_loss_mask[0, layout.frame_positions]
        assert torch.equal(masked_frames, answer & (codes[0] < lm.text_card))
    assert len({p.kind for c in data.conversations for p in c.placements}) >= 2

    # Training ran, and the result is a checkpoint the app's loader loads from its manifest.
    assert len(result.losses) == 3 and all(math.isfinite(x) for x in result.losses)
    manifest = load_user_manifests()["tiny-recipe-test"]
    assert manifest.span_wrapping.trained
    loaded = load_checkpoint(manifest)
    assert loaded.folder == tmp_path / "out" / "checkpoint"
    conv = data.conversations[0]
    layout = build_layout(loaded.lm, conv.example.codes[None], conv.example.spans,
                          conv.example.answer_frames[None])
    with torch.no_grad():
        loss, _ = layout_losses(loaded.lm, layout, audio=False)
        _, trained = lm.forward_text(layout.inputs)
        _, reloaded = loaded.lm.forward_text(layout.inputs)
    assert math.isfinite(float(loss))
    assert (trained - reloaded).abs().max() < 1e-4
    saved = json.loads((tmp_path / "out" / "recipe.json").read_text())
    assert saved["folder"] == str(loaded.folder)
    assert (tmp_path / "out" / "samples" / "conversation0_user.wav").is_file()
    assert conv.example.codes.shape[-1] * FRAME_SAMPLES == len(conv.user_pcm)


def test_recipe_command_with_lora(own_data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    code = main_train(["recipe", "--model", "tiny", "--dialogues", "2", "--steps", "2",
                       "--batch-size", "1", "--out", str(out), "--lora", "--lora-rank", "4",
                       "--id", "tiny-recipe-lora", "--device", "cpu"])
    assert code == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert report["lora"] and report["steps"] == 2 and math.isfinite(report["loss_last"])
    loaded = load_checkpoint(load_user_manifests()["tiny-recipe-lora"])
    assert loaded.info.raw_config["lora"] and (out / "checkpoint" / "lora.safetensors").is_file()
