"""The proof on a tiny model: a Moshi-architecture LM learns to READ an injected span.

The task (`python main.py train span-proxy`): a span holds key -> value facts, the values
drawn fresh in every episode (so they cannot be memorised). Some frames later the user
"asks": the key arrives in the user's audio stream as a fixed code pattern (one pattern per
key, on the 8 user codebooks, `QUESTION_FRAMES` frames long), and right after it the model
must say the value (two words) in its text stream, then fall silent (padding) again.

Training sequences are built with `span_layout.build_layout` (the layout the engine feeds)
from spans tokenized by the injector's `SpanTokenizer`. Evaluation goes through the real
inference path: `LMGen` steps with greedy decoding, the span injected between two frames by
`app.engine.span_injector.prefill` after `widen_attention_rings`, exactly as the engine does.
The model's own audio codes are teacher-forced with random codes through LMGen's
`depformer_replace_tokens` (the text task does not use the depformer; training sees random
audio codes too), which also keeps a step at a few milliseconds.

The model is the catalog's tiny architecture with a smaller context (`PROXY_CONTEXT`), so
that a conversation wraps the attention rings after a few hundred frames: cheap on a CPU,
and a 10x longer RoPE period (`PROXY_MAX_PERIOD`), which carries reading to 4x the trained
span-to-question distance.
Training is a curriculum: short one-episode conversations first (cheap steps: reading is
learnt there), then conversations whose second episode is deep (it follows a gap of about
the context, so its window holds only conversation, no sequence start, no earlier span).

The report: exact match (both words) and first-token accuracy of fresh questions with the
span injected in one chunk, one position at a time (and the fraction of text tokens
identical to the chunked run), with no span, with another episode's span, at distances
0..4x the largest trained, deep in a long conversation past the context, and for spans of
several facts (first-token accuracy against 1/P). Training is on one fact per span: mixing
2 and 4 facts into a 3-minute budget kept the model from learning even one fact.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from moshi.models import LMGen, LMModel, loaders

from app.checkpoints.catalog import SpanWrapping
from app.checkpoints.tiny_builder import tiny_lm_config
from app.engine.kv_ring import widen_attention_rings
from app.engine.span_injector import prefill
from app.engine.span_text import SpanTokenizer
from app.training.span_layout import SpanInsert, build_layout
from app.training.trainer import TrainingExample, stack_layouts

PROXY_CONTEXT = 128  # positions: the window wraps after ~10 s of frames
# RoPE's longest period: 10x the tiny's 10000. With it the model reads a span 4x farther
# than trained at 0.98 exact match (0.79 with 10000, same budget).
PROXY_MAX_PERIOD = 100_000
QUESTION_FRAMES = 2  # the key's code pattern lasts this many user frames
VALUE_WORDS = 2  # a value is two words, one token each
MAX_DISTANCE = 24  # frames from the span to the question, the largest seen in training
DEEP_GAP = (100, 130)  # frames before a later episode's span: its window sees no earlier span
KEY_WORDS = ("water", "house", "door", "car", "city", "book", "room", "office")
_NOT_VALUES = set(KEY_WORDS) | {"is", "system", "the", "a", "an", "and", "of", "to"}
OTHER_FRAMES_WEIGHT = 0.1  # loss weight of the silent (padding) frames against the answers


def proxy_lm_config(context: int = PROXY_CONTEXT, max_period: int = PROXY_MAX_PERIOD) -> dict:
    """The catalog tiny's architecture (17 streams, the real delays, its sizes) with a
    smaller context and a longer RoPE period."""
    return tiny_lm_config() | {"context": context, "max_period": max_period}


def build_proxy_lm(seed: int, context: int = PROXY_CONTEXT,
                   max_period: int = PROXY_MAX_PERIOD) -> LMModel:
    torch.manual_seed(seed)
    return loaders.get_moshi_lm(
        None, lm_kwargs=proxy_lm_config(context, max_period), device="cpu", dtype=torch.float32
    )


# ---- the task ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    """One episode: a span of `pairs` facts, and a question about one of its keys."""

    span: SpanInsert  # its frame is where it lands in the conversation
    key: int  # index in KEY_WORDS of the key asked
    value_ids: tuple[int, ...]  # the answer's token ids
    question_frame: int  # first frame of the key's pattern in the user stream
    pairs: int

    @property
    def answer_frame(self) -> int:
        return self.question_frame + QUESTION_FRAMES

    @property
    def end_frame(self) -> int:  # one past the padding frame that closes the answer
        return self.answer_frame + len(self.value_ids) + 1


class ProxyTask:
    """Keys, fresh values, the user-audio key patterns and the spans' text."""

    def __init__(self, sp, card: int, text_padding_id: int, wrapping: SpanWrapping,
                 max_span_tokens: int = 128, seed: int = 0, values: int = 64) -> None:
        self.sp = sp
        self.card = card
        self.pad = text_padding_id
        self.span_tokenizer = SpanTokenizer(sp, wrapping, max_span_tokens)
        self.key_ids = [self._single(w) for w in KEY_WORDS]
        words = []
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            word = piece[1:]
            if (piece.startswith("▁") and word.isalpha() and word.islower() and len(word) > 1
                    and word not in _NOT_VALUES):
                words.append(word)
        # A fixed subset of the words (the values are drawn from it fresh every episode).
        words = sorted(words)
        self.value_words = sorted(random.Random(seed).sample(words, min(values, len(words))))
        if len(self.value_words) < 16:
            raise ValueError("the tokenizer has too few single-token words for values")
        generator = torch.Generator().manual_seed(10_000 + seed)
        # Per key, a fixed pattern [8, QUESTION_FRAMES] on the user codebooks: its "word".
        self.key_patterns = torch.randint(
            0, card, (len(KEY_WORDS), 8, QUESTION_FRAMES), generator=generator
        )

    def _single(self, word: str) -> int:
        ids = self.sp.encode(word)
        if len(ids) != 1:
            raise ValueError(f"{word!r} is not one token in this tokenizer")
        return ids[0]

    def span_text(self, keys: Sequence[int], values: Sequence[Sequence[str]]) -> str:
        return " . ".join(
            f"{KEY_WORDS[k]} is {' '.join(v)}" for k, v in zip(keys, values, strict=True)
        )

    def question(self, rng: random.Random, pairs: int, span_frame: int, distance: int,
                 values_from: random.Random | None = None) -> Question:
        """A fresh episode. `values_from` draws the span (another episode's span when it is
        a different generator than the one deciding which key is asked)."""
        src = values_from or rng
        keys = src.sample(range(len(KEY_WORDS)), pairs)
        values = [src.sample(self.value_words, VALUE_WORDS) for _ in keys]
        asked = rng.randrange(pairs)
        text = self.span_text(keys, values)
        span = SpanInsert.from_text(self.span_tokenizer, text, span_frame)
        value_ids = tuple(self._single(w) for w in values[asked])
        if not set(value_ids) <= set(span.ids):
            raise AssertionError("the span's tokens do not hold the value")
        return Question(span, keys[asked], value_ids, span_frame + distance, pairs)

    def with_span(self, q: Question, span: SpanInsert | None) -> Question:
        """The same question, with another span (or, with None, a span nobody injects)."""
        return Question(span or SpanInsert(q.span.frame, ()), q.key, q.value_ids,
                        q.question_frame, q.pairs)

    def fill(self, codes: torch.Tensor, q: Question) -> None:
        """Write the question (user codes) and the answer (text) into aligned codes [17, T]."""
        t = q.question_frame
        codes[9:17, t : t + QUESTION_FRAMES] = self.key_patterns[q.key]
        a = q.answer_frame
        codes[0, a : a + len(q.value_ids)] = torch.tensor(q.value_ids)

    def random_codes(self, frames: int, generator: torch.Generator) -> torch.Tensor:
        """[17, T]: silent text (padding), random model and user audio codes."""
        codes = torch.randint(0, self.card, (17, frames), generator=generator)
        codes[0] = self.pad
        return codes


def training_examples(task: ProxyTask, rng: random.Random, generator: torch.Generator,
                      pairs: Sequence[int], episodes: int) -> TrainingExample:
    """A conversation of `episodes` episodes: the first one near the start, later ones each
    after a gap longer than the context (deep, the rings would have wrapped)."""
    questions, frame = [], 0
    for e in range(episodes):
        gap = rng.randint(0, 12) if e == 0 else rng.randint(*DEEP_GAP)
        q = task.question(rng, rng.choice(list(pairs)), frame + gap,
                          rng.randint(0, MAX_DISTANCE))
        questions.append(q)
        frame = q.end_frame
    codes = task.random_codes(frame, generator)
    answers = torch.zeros(frame, dtype=torch.bool)
    for q in questions:
        task.fill(codes, q)
        answers[q.answer_frame : q.end_frame] = True
    return TrainingExample(codes, tuple(q.span for q in questions), answers)


def proxy_batches(task: ProxyTask, batch_size: int, pairs: Sequence[int], episodes: int,
                  seed: int) -> Iterator[list[TrainingExample]]:
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    while True:
        yield [training_examples(task, rng, generator, pairs, episodes)
               for _ in range(batch_size)]


def proxy_loss(lm: LMModel, examples: Sequence[TrainingExample]) -> tuple[torch.Tensor, float]:
    """Text cross-entropy: answers (words and closing pad) + OTHER_FRAMES_WEIGHT x silence.

    Returns the loss to optimise and the answer-frame loss alone."""
    layouts = [build_layout(lm, ex.codes[None], ex.spans, ex.answer_frames[None])
               for ex in examples]
    layout = stack_layouts(layouts, lm.zero_token_id)
    _, text_logits = lm.forward_text(layout.inputs)  # [B, 1, S, card]
    targets = layout.text_targets  # [B, S]; -1 on spans and padding
    answer = layout.text_loss_mask  # [B, S]
    other = (targets >= 0) & (targets < lm.text_card) & ~answer
    logits = text_logits[:, 0].float()
    answer_loss = F.cross_entropy(logits[answer], targets[answer])
    other_loss = F.cross_entropy(logits[other], targets[other])
    return answer_loss + OTHER_FRAMES_WEIGHT * other_loss, float(answer_loss.detach())


@dataclass
class ProxyTraining:
    steps: int
    seconds: float
    losses: list[float]  # answer-frame loss per step


def train_proxy(lm: LMModel, shallow: Iterator[list[TrainingExample]],
                deep: Iterator[list[TrainingExample]], max_steps: int, max_seconds: float,
                lr: float, deep_from: float = 0.6, warmup: int = 50) -> ProxyTraining:
    """AdamW with warm-up and cosine decay over whichever of the budgets ends first.

    A curriculum: short conversations first (cheap steps, reading is learnt there), then
    from `deep_from` of the budget on, conversations whose later episodes are deep."""
    params = [p for p in lm.parameters()]
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    lm.train()
    losses: list[float] = []
    start = time.perf_counter()
    step = 0
    while step < max_steps:
        elapsed = time.perf_counter() - start
        progress = max(step / max_steps, elapsed / max_seconds)
        if progress >= 1.0:
            break
        scale = min(1.0, (step + 1) / warmup) * 0.5 * (1.0 + math.cos(math.pi * progress))
        for group in optimizer.param_groups:
            group["lr"] = lr * max(scale, 0.02)
        loss, answer_loss = proxy_loss(lm, next(deep if progress >= deep_from else shallow))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        losses.append(answer_loss)
        step += 1
    lm.eval()
    for p in params:
        p.requires_grad_(False)
    return ProxyTraining(step, time.perf_counter() - start, losses)


# ---- evaluation through LMGen and the injector --------------------------------------------

CHUNKED, ONE_AT_A_TIME = "chunked", "one-at-a-time"


def stream_codes(task: ProxyTask, questions: Sequence[Sequence[Question]], seed: int
                 ) -> tuple[torch.Tensor, dict[int, tuple[int, ...]]]:
    """The aligned codes [B, 17, T] of B conversations (the text stream: what a perfect
    model says) and the spans to inject, by frame."""
    frames = max(q.end_frame for qs in questions for q in qs)
    generator = torch.Generator().manual_seed(seed)
    codes = torch.stack([task.random_codes(frames, generator) for _ in questions])
    injections: dict[int, tuple[int, ...]] = {}
    for b, qs in enumerate(questions):
        for q in qs:
            task.fill(codes[b], q)
            if q.span.ids and injections.setdefault(q.span.frame, q.span.ids) != q.span.ids:
                raise ValueError("streams of one batch must share their spans")
    return codes, injections


@torch.no_grad()
def run_streams(lm: LMModel, task: ProxyTask, questions: Sequence[Sequence[Question]],
                mode: str, seed: int) -> torch.Tensor:
    """Greedy LMGen over B streams (B = len(questions)); stream b answers questions[b].

    Spans are injected with the injector's `prefill` before their frame: one forward pass
    (CHUNKED) or one position at a time. Spans must be the same in every stream at the same
    frame (prefill feeds one span to the whole batch). Returns the text tokens [B, T]."""
    codes, injections = stream_codes(task, questions, seed)
    batch, _, frames = codes.shape
    # Step s receives user frame s - 1 (codes_from_stream's alignment); step 0's is unseen.
    user = torch.cat([codes[:, 9:17, :1], codes[:, 9:17]], dim=2)  # [B, 8, T + 1]
    # The model's own audio, teacher-forced: LMGen takes it as the depformer gives it, in
    # the delayed layout (codebook k of step s is frame s - delay[k]).
    audio = torch.stack([
        torch.roll(codes[:, k], lm.delays[k], dims=1) for k in range(1, 9)
    ], dim=1)  # [B, 8, T]; a rolled-in first column is never read (initial tokens there)
    texts: list[torch.Tensor] = []
    gen = LMGen(lm, use_sampling=False, on_text_hook=lambda t: texts.append(t.clone()))
    longest = max((len(ids) for ids in injections.values()), default=1)
    with gen.streaming(batch):
        widen_attention_rings(lm, longest if mode == CHUNKED else 1)
        for step in range(frames):
            ids = injections.get(step)
            if ids:
                if mode == CHUNKED:
                    prefill(gen, ids)
                else:
                    for token in ids:
                        prefill(gen, [token])
            gen.step(user[:, :, step : step + 1],
                     depformer_replace_tokens=audio[:, :, step : step + 1])
    return torch.stack(texts, dim=1)  # [B, T]: text of frame t, chosen at step t


def score(text: torch.Tensor, questions: Sequence[Sequence[Question]]) -> tuple[int, int, int]:
    """(exact matches, first-token matches, questions) over the streams' answers."""
    exact = first = total = 0
    for b, qs in enumerate(questions):
        for q in qs:
            said = text[b, q.answer_frame : q.answer_frame + len(q.value_ids)].tolist()
            exact += said == list(q.value_ids)
            first += said[0] == q.value_ids[0]
            total += 1
    return exact, first, total


def _frac(n: int, d: int) -> float:
    return round(n / max(1, d), 4)


def evaluate(lm: LMModel, task: ProxyTask, questions: int, seed: int,
             multi_pairs: Sequence[int] = (2, 4), deep: bool = True) -> dict:
    """Every measurement of the report, `questions` fresh questions each."""
    rng = random.Random(1_000_003 + seed)
    other = random.Random(2_000_003 + seed)
    out: dict = {"questions_per_measure": questions}
    start = time.perf_counter()

    # 1. In-distribution questions (one fact): chunked, one at a time, no span, wrong span.
    plain = [task.question(rng, 1, rng.randint(0, 12), rng.randint(0, MAX_DISTANCE))
             for _ in range(questions)]
    counts = {k: [0, 0, 0] for k in ("chunked", "one_at_a_time", "no_span", "wrong_span")}
    same_streams = same_tokens = tokens = 0
    for i, q in enumerate(plain):
        chunked = run_streams(lm, task, [[q]], CHUNKED, seed + i)
        single = run_streams(lm, task, [[q]], ONE_AT_A_TIME, seed + i)
        wrong_span = task.question(other, 1, q.span.frame, 0).span
        none = run_streams(lm, task, [[task.with_span(q, None)]], CHUNKED, seed + i)
        wrong = run_streams(lm, task, [[task.with_span(q, wrong_span)]], CHUNKED, seed + i)
        same_streams += bool(torch.equal(chunked, single))
        same_tokens += int((chunked == single).sum())
        tokens += chunked.numel()
        for key, text in (("chunked", chunked), ("one_at_a_time", single), ("no_span", none),
                          ("wrong_span", wrong)):
            for j, n in enumerate(score(text, [[q]])):
                counts[key][j] += n
    for key, (exact, first, total) in counts.items():
        out[key] = {"exact": _frac(exact, total), "first_token": _frac(first, total)}
    out["one_at_a_time"].update(identical_streams=_frac(same_streams, len(plain)),
                                identical_tokens=_frac(same_tokens, tokens))
    out["value_chance"] = round(1 / len(task.value_words), 4)

    # 2. Distances 0 .. 4x the largest trained: one span, one stream per distance.
    distances = [0, MAX_DISTANCE, 2 * MAX_DISTANCE, 3 * MAX_DISTANCE, 4 * MAX_DISTANCE]
    hits = {d: [0, 0] for d in distances}
    for i in range(questions):
        base = task.question(rng, 1, rng.randint(0, 12), 0)
        batch = [[Question(base.span, base.key, base.value_ids, base.span.frame + d, 1)]
                 for d in distances]
        text = run_streams(lm, task, batch, CHUNKED, seed + 10_000 + i)
        for d, qs in zip(distances, batch, strict=True):
            exact, first, _ = score(text[distances.index(d) : distances.index(d) + 1], [qs])
            hits[d][0] += exact
            hits[d][1] += first
    out["distances"] = {str(d): _frac(hits[d][0], questions) for d in distances}
    out["max_distance_trained"] = MAX_DISTANCE

    # 3. Deep: one long conversation, each span after a gap longer than the context.
    if deep:
        qs, frame = [], 0
        for e in range(questions):
            gap = 300 if e == 0 else rng.randint(*DEEP_GAP)
            q = task.question(rng, 1, frame + gap, rng.randint(0, MAX_DISTANCE))
            qs.append(q)
            frame = q.end_frame
        text = run_streams(lm, task, [qs], CHUNKED, seed + 20_000)
        exact, first, total = score(text, [qs])
        out["deep"] = {"exact": _frac(exact, total), "first_token": _frac(first, total),
                       "first_span_frame": qs[0].span.frame, "frames": frame,
                       "context": lm.context, "window_wraps": frame > lm.context}

    # 4. Several facts per span: every key of the span asked, each in its own stream.
    multi = {}
    for pairs in multi_pairs:
        exact = first = any_value = total = 0
        for i in range(max(1, questions // pairs)):
            base = task.question(rng, pairs, rng.randint(0, 12), rng.randint(0, MAX_DISTANCE))
            facts = _span_keys(task, base.span)
            batch = [[Question(base.span, key, value_ids, base.question_frame, pairs)]
                     for key, value_ids in facts]
            text = run_streams(lm, task, batch, CHUNKED, seed + 30_000 + i)
            e, f, t = score(text, batch)
            exact, first, total = exact + e, first + f, total + t
            starts = {value_ids[0] for _, value_ids in facts}
            any_value += sum(int(text[b, qs[0].answer_frame]) in starts
                             for b, qs in enumerate(batch))
        # first_token against 1/P: above it, the question's key selects the fact; a model
        # that reads the span but cannot select says SOME value (any_value_first_token).
        multi[str(pairs)] = {"exact": _frac(exact, total), "first_token": _frac(first, total),
                             "chance_1_over_p": round(1 / pairs, 4),
                             "any_value_first_token": _frac(any_value, total),
                             "questions": total}
    out["multi_fact"] = multi
    out["eval_seconds"] = round(time.perf_counter() - start, 1)
    return out


def _span_keys(task: ProxyTask, span: SpanInsert) -> list[tuple[int, tuple[int, ...]]]:
    """(key, value ids) of each fact of a span, read back from its token ids."""
    ids = list(span.ids)
    facts = []
    for k, key_id in enumerate(task.key_ids):
        if key_id in ids:
            at = ids.index(key_id) + 2  # "<key> is <v1> <v2>"
            facts.append((k, tuple(ids[at : at + VALUE_WORDS])))
    return facts


# ---- the whole proof ---------------------------------------------------------------------


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__,
            "platform": platform.platform()}


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def run_proof(sp, wrapping: SpanWrapping, *, max_span_tokens: int = 128, max_seconds: float,
              max_steps: int, batch_size: int, lr: float, pairs: Sequence[int], episodes: int,
              values: int = 64, deep_from: float = 0.6, max_period: int = PROXY_MAX_PERIOD,
              questions: int, seed: int, threads: int | None, deep: bool = True,
              multi_pairs: Sequence[int] = (2, 4)) -> dict:
    if threads:
        torch.set_num_threads(threads)
    load_start = load_average()
    lm = build_proxy_lm(seed, max_period=max_period)
    task = ProxyTask(sp, lm.card, lm.text_padding_token_id, wrapping, max_span_tokens, seed,
                     values)
    shallow = proxy_batches(task, batch_size, pairs, 1, seed)
    deep_batches = proxy_batches(task, batch_size, pairs, episodes, seed + 1)
    trained = train_proxy(lm, shallow, deep_batches, max_steps, max_seconds, lr, deep_from)
    window = max(1, min(20, trained.steps // 4))
    report = {
        "model": {"config": "catalog tiny architecture; context and RoPE period changed",
                  "dim": lm.dim, "layers": len(lm.transformer.layers),
                  "rope_max_period": proxy_lm_config(max_period=max_period)["max_period"],
                  "params": sum(p.numel() for p in lm.parameters()), "context": lm.context},
        "task": {"keys": len(KEY_WORDS), "values": len(task.value_words),
                 "value_words": VALUE_WORDS, "question_frames": QUESTION_FRAMES,
                 "pairs_trained": list(pairs), "deep_from": deep_from,
                 "episodes_per_deep_sequence": episodes,
                 "deep_gap_frames": list(DEEP_GAP), "max_distance_trained": MAX_DISTANCE},
        "training": {"steps": trained.steps, "seconds": round(trained.seconds, 1),
                     "batch_size": batch_size, "lr": lr,
                     "answer_loss_first": round(sum(trained.losses[:window]) / window, 4),
                     "answer_loss_last": round(sum(trained.losses[-window:]) / window, 4),
                     "averaged_over_steps": window},
        "threads": torch.get_num_threads(),
        "machine": machine(),
    }
    report["eval"] = evaluate(lm, task, questions, seed, multi_pairs, deep)
    report["load_average"] = {"start": load_start, "end": load_average()}
    return report


# ---- `python main.py train span-proxy` ---------------------------------------------------


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print the report as one JSON object (the only format)")
    parser.add_argument("--seconds", type=float, default=175.0, help="training time budget")
    parser.add_argument("--steps", type=int, default=100_000, help="training step budget")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--values", type=int, default=64, help="size of the value vocabulary")
    parser.add_argument("--deep-from", type=float, default=0.6,
                        help="fraction of the budget after which training adds deep spans")
    parser.add_argument("--pairs", default="1", help="facts per span in training, e.g. 1,2,4")
    parser.add_argument("--episodes", type=int, default=2,
                        help="episodes per training conversation (the later ones deep)")
    parser.add_argument("--questions", type=int, default=200,
                        help="fresh questions per measurement")
    parser.add_argument("--multi-pairs", default="2,4", help="facts per span to evaluate")
    parser.add_argument("--no-deep", action="store_true", help="skip the deep measurement")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's)")
    parser.add_argument("--max-period", type=int, default=PROXY_MAX_PERIOD,
                        help="RoPE max period of the proxy LM (the catalog tiny's: 10000)")
    parser.add_argument("--seed", type=int, default=0)


def run_from_args(args: argparse.Namespace) -> dict:
    from app.checkpoints.catalog import get_manifest
    from app.checkpoints.loader import ensure_built, load_checkpoint

    # The tiny checkpoint lends its SentencePiece tokenizer and span wrapping (through the
    # app's loader); the proxy LM itself is built fresh from `proxy_lm_config`.
    manifest = get_manifest("tiny")
    checkpoint = load_checkpoint(manifest, ensure_built(manifest), device="cpu")
    return run_proof(
        checkpoint.tokenizer, manifest.span_wrapping, max_span_tokens=manifest.max_span_tokens,
        max_seconds=args.seconds, max_steps=args.steps, batch_size=args.batch_size,
        lr=args.lr, pairs=_int_list(args.pairs), episodes=args.episodes, values=args.values,
        deep_from=args.deep_from, max_period=args.max_period,
        questions=args.questions, seed=args.seed, threads=args.threads or None,
        deep=not args.no_deep, multi_pairs=_int_list(args.multi_pairs),
    )
