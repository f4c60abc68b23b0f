"""The proof on a tiny model: a Moshi-architecture LM learns to READ an injected span.

The task (`python main.py train span-proxy`; its run and report: span_proxy_proof.py): a
span holds key -> value facts (a value is two words, one token each). Some frames later the
user "asks": the key arrives in the user's audio stream as a fixed code pattern (one pattern
per key, on the 8 user codebooks, `QUESTION_FRAMES` frames long), and right after it the
model must say the value in its text stream, then fall silent (padding) again.

Training sequences are built with `span_layout.build_layout` (the layout the engine feeds)
from spans tokenized by the injector's `SpanTokenizer`. Evaluation goes through the real
inference path: `LMGen` steps with greedy decoding, the span injected between two frames by
`positions_codes` read in one forward after `widen_attention_rings`, as the engine reads them.
The model's own audio codes are teacher-forced with random codes through LMGen's
`depformer_replace_tokens` (the text task does not use the depformer; training sees random
audio codes too), which also keeps a step at a few milliseconds.

The model is the catalog's tiny architecture (real Moshi's kind: RoPE period 10000) with a
smaller context (`PROXY_CONTEXT`), so that a conversation wraps the attention rings after a
few hundred frames.

Reproducible: training stops after a STEP budget, every random choice comes from an
explicit seed (a torch generator or a `random.Random`), and torch runs on a fixed number of
threads (1 by default). Two runs with the same arguments give identical numbers however
loaded the machine is; only the `wall` section (seconds, load average) differs.

Unseen: every fact (key, value words) belongs to exactly one split, train, dev or eval, by
a stable hash (`fact_split`). Training spans only hold train facts, the development
measures dev facts, the evaluation eval facts, so no evaluation span can occur in a
training span. The run also checks it: every training span's content is recorded as it is
generated, and `eval_overlap` counts the evaluation spans whose content occurs verbatim
inside one (it must be 0). Choices (steps, curriculum, formats) are made with `--split dev`
(its own facts and its own seeds); the report is on `--split eval`.

Key selection (`--facts 4`): spans of 1..4 facts, the question asks one key. The model
first says the key's word (the "echo", learnt from the audio pattern alone), then the
value: reading the value is then the same induction as for one fact (find the word just
said in the span, copy what follows). Accuracy is measured on the VALUE's first token
against chance 1/P, the echo separately.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from moshi.models import LMGen, LMModel, loaders

from app.checkpoints.catalog import SpanWrapping
from app.checkpoints.tiny_builder import tiny_lm_config
from app.engine.kv_ring import widen_attention_rings
from app.engine.position_forwards import positions_codes
from app.engine.span_text import SpanTokenizer
from app.training.span_layout import SpanInsert, build_layout
from app.training.trainer import TrainingExample, stack_layouts

PROXY_CONTEXT = 128  # positions: the window wraps after ~10 s of frames
MOSHI_MAX_PERIOD = 10_000  # RoPE's longest period in real Moshi (and the catalog tiny)
TINY_LAYERS = 2  # the catalog tiny's transformer layers
QUESTION_FRAMES = 2  # the key's code pattern lasts this many user frames
VALUE_WORDS = 2  # a value is two words, one token each
MAX_DISTANCE = 24  # frames from the span to the question, the largest seen in training
DEEP_GAP = (100, 130)  # frames before a later episode's span: its window sees no earlier span
KEY_WORDS = ("water", "house", "door", "car", "city", "book", "room", "office")
_NOT_VALUES = set(KEY_WORDS) | {"is", "system", "the", "a", "an", "and", "of", "to"}
OTHER_FRAMES_WEIGHT = 0.1  # loss weight of the silent (padding) frames against the answers
FACT_FORMAT = "{key} {value}"  # a fact in the span text; facts are joined by FACT_SEPARATOR
FACT_SEPARATOR = " . "
SPLITS = ("train", "dev", "eval")
SPLIT_SEEDS = {"dev": 7_000_001, "eval": 1_000_003}  # the measures' own seeds, per split


def fact_split(key: str, value: Sequence[str]) -> str:
    """The split a fact (key, value words) belongs to: 1/8 eval, 1/8 dev, the rest train.

    A stable hash (not Python's salted `hash`), so every run splits the same way."""
    text = " ".join((key, *value))
    bucket = hashlib.blake2b(text.encode(), digest_size=1).digest()[0] % 8
    return "eval" if bucket == 0 else "dev" if bucket == 1 else "train"


def proxy_lm_config(context: int = PROXY_CONTEXT, max_period: int = MOSHI_MAX_PERIOD,
                    layers: int = TINY_LAYERS) -> dict:
    """The catalog tiny's architecture (17 streams, the real delays, its sizes) with a
    smaller context."""
    return tiny_lm_config() | {"context": context, "max_period": max_period,
                               "num_layers": layers}


def build_proxy_lm(seed: int, context: int = PROXY_CONTEXT,
                   max_period: int = MOSHI_MAX_PERIOD, layers: int = TINY_LAYERS) -> LMModel:
    """Initialised from `seed`; the caller's global torch RNG is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return loaders.get_moshi_lm(
            None, lm_kwargs=proxy_lm_config(context, max_period, layers), device="cpu",
            dtype=torch.float32,
        )


# ---- the task ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    """One episode: a span of facts, and a question about one of them."""

    span: SpanInsert  # its frame is where it lands in the conversation
    content: tuple[int, ...]  # the span's ids without the wrapping (the overlap check's unit)
    facts: tuple[tuple[int, tuple[int, ...]], ...]  # (key index, value ids) of every fact
    asked: int  # index in `facts` of the fact asked
    question_frame: int  # first frame of the key's pattern in the user stream
    answer_ids: tuple[int, ...]  # what the model must say: [key word,] value words
    value_at: int  # index in answer_ids of the value's first token (1 with the key echo)

    @property
    def key(self) -> int:
        return self.facts[self.asked][0]

    @property
    def pairs(self) -> int:
        return len(self.facts)

    @property
    def answer_frame(self) -> int:
        return self.question_frame + QUESTION_FRAMES

    @property
    def end_frame(self) -> int:  # one past the padding frame that closes the answer
        return self.answer_frame + len(self.answer_ids) + 1


class ProxyTask:
    """Keys, the split value pairs, the user-audio key patterns and the spans' text."""

    def __init__(self, sp, card: int, text_padding_id: int, wrapping: SpanWrapping,
                 max_span_tokens: int = 128, seed: int = 0, values: int = 64,
                 key_echo: bool = False, words_per_value: int = VALUE_WORDS) -> None:
        self.sp = sp
        self.words_per_value = words_per_value
        self.card = card
        self.pad = text_padding_id
        self.key_echo = key_echo
        self.span_tokenizer = SpanTokenizer(sp, wrapping, max_span_tokens)
        self.key_ids = [self._single(w) for w in KEY_WORDS]
        words = []
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            word = piece[1:]
            if (piece.startswith("▁") and word.isalpha() and word.islower() and len(word) > 1
                    and word not in _NOT_VALUES):
                words.append(word)
        # A fixed subset of the words; a value is an ordered pair of two of them.
        words = sorted(words)
        self.value_words = sorted(random.Random(seed).sample(words, min(values, len(words))))
        if len(self.value_words) < 16:
            raise ValueError("the tokenizer has too few single-token words for values")
        self.word_ids = {w: self._single(w) for w in self.value_words}
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
        return FACT_SEPARATOR.join(
            FACT_FORMAT.format(key=KEY_WORDS[k], value=" ".join(v))
            for k, v in zip(keys, values, strict=True)
        )

    def _values(self, rng: random.Random, split: str, keys: Sequence[int]) -> list[list[str]]:
        """A value per key, each fact in `split`, all words different (so that a value's
        first word names one fact of the span)."""
        chosen: list[list[str]] = []
        for k in keys:
            while True:
                words = rng.sample(self.value_words, self.words_per_value)
                used = {w for v in chosen for w in v}
                if fact_split(KEY_WORDS[k], words) == split and not used & set(words):
                    chosen.append(words)
                    break
        return chosen

    def question(self, rng: random.Random, pairs: int, span_frame: int, distance: int,
                 split: str, values_from: random.Random | None = None) -> Question:
        """A fresh episode whose values come from `split`. `values_from` draws the span
        (another episode's span when it is a different generator than the one deciding
        which key is asked)."""
        src = values_from or rng
        keys = src.sample(range(len(KEY_WORDS)), pairs)
        values = self._values(src, split, keys)
        asked = rng.randrange(pairs)
        tokens = self.span_tokenizer.encode(self.span_text(keys, values))
        facts = tuple((k, tuple(self.word_ids[w] for w in v))
                      for k, v in zip(keys, values, strict=True))
        if not set(facts[asked][1]) <= set(tokens.content_ids):
            raise AssertionError("the span's tokens do not hold the value")
        span = SpanInsert(span_frame, tokens.ids)
        return self.ask(Question(span, tokens.content_ids, facts, 0, span_frame + distance,
                                 (), 0), asked)

    def ask(self, q: Question, asked: int) -> Question:
        """The same span and question frame, asking fact `asked`."""
        key, value_ids = q.facts[asked]
        echo = (self.key_ids[key],) if self.key_echo else ()
        return replace(q, asked=asked, answer_ids=echo + value_ids, value_at=len(echo))

    def with_span(self, q: Question, span: Question | None) -> Question:
        """The same question, with another episode's span (None: a span nobody injects)."""
        if span is None:
            return replace(q, span=SpanInsert(q.span.frame, ()), content=())
        return replace(q, span=SpanInsert(q.span.frame, span.span.ids), content=span.content)

    def fill(self, codes: torch.Tensor, q: Question) -> None:
        """Write the question (user codes) and the answer (text) into aligned codes [17, T]."""
        t = q.question_frame
        codes[9:17, t : t + QUESTION_FRAMES] = self.key_patterns[q.key]
        a = q.answer_frame
        codes[0, a : a + len(q.answer_ids)] = torch.tensor(q.answer_ids)

    def random_codes(self, frames: int, generator: torch.Generator) -> torch.Tensor:
        """[17, T]: silent text (padding), random model and user audio codes."""
        codes = torch.randint(0, self.card, (17, frames), generator=generator)
        codes[0] = self.pad
        return codes


class SpanLedger:
    """The content of every training span, recorded as it is generated, so that the
    evaluation can count its spans that occur verbatim inside one."""

    def __init__(self) -> None:
        self._chunks: list[str] = []

    @staticmethod
    def _text(ids: Sequence[int]) -> str:
        return "".join(chr(0x100 + i) for i in ids)  # one character per id; "\0" separates

    def add(self, content: Sequence[int]) -> None:
        self._chunks.append(self._text(content))

    @property
    def spans(self) -> int:
        return len(self._chunks)

    def occurring(self, contents: Sequence[Sequence[int]]) -> int:
        """How many of `contents` occur as a contiguous run of some training span."""
        recorded = "\0".join(self._chunks)
        return sum(self._text(c) in recorded for c in contents if c)


def training_examples(task: ProxyTask, rng: random.Random, generator: torch.Generator,
                      pairs: Sequence[int], episodes: int, ledger: SpanLedger,
                      ask_all: bool = False) -> TrainingExample:
    """A conversation of `episodes` episodes: the first one near the start, later ones each
    after a gap longer than the context (deep, the rings would have wrapped). With
    `ask_all`, every key of a span is asked, one question after the other (the first one
    as usual), so that only the key asked tells the answers apart."""
    questions, spans, frame = [], [], 0
    for e in range(episodes):
        gap = rng.randint(0, 12) if e == 0 else rng.randint(*DEEP_GAP)
        q = task.question(rng, rng.choice(list(pairs)), frame + gap,
                          rng.randint(0, MAX_DISTANCE), "train")
        ledger.add(q.content)
        spans.append(q.span)
        questions.append(q)
        others = [i for i in range(q.pairs) if i != q.asked] if ask_all else []
        rng.shuffle(others)
        for i in others:
            questions.append(replace(task.ask(q, i),
                                     question_frame=questions[-1].end_frame + rng.randint(0, 4)))
        frame = questions[-1].end_frame
    codes = task.random_codes(frame, generator)
    answers = torch.zeros(frame, dtype=torch.bool)
    for q in questions:
        task.fill(codes, q)
        answers[q.answer_frame : q.end_frame] = True
    return TrainingExample(codes, tuple(spans), answers)


def proxy_batches(task: ProxyTask, batch_size: int, pairs: Sequence[int], episodes: int,
                  seed: int, ledger: SpanLedger, ask_all: bool = False
                  ) -> Iterator[list[TrainingExample]]:
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    while True:
        yield [training_examples(task, rng, generator, pairs, episodes, ledger, ask_all)
               for _ in range(batch_size)]


def proxy_loss(lm: LMModel, examples: Sequence[TrainingExample]) -> tuple[torch.Tensor, float]:
    """Text cross-entropy: answers (words and closing pad) + OTHER_FRAMES_WEIGHT x silence.

    Returns the loss to optimise and the answer-frame loss alone."""
    layouts = [build_layout(lm, ex.codes[None], ex.spans,
                            None if ex.answer_frames is None else ex.answer_frames[None])
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


@dataclass(frozen=True)
class Phase:
    """A stretch of the curriculum: until `until` x the step budget, conversations of
    `episodes` episodes (the later ones deep) whose spans hold one of `facts` facts, every
    key of a span asked with `ask_all`."""

    until: float
    facts: tuple[int, ...]
    episodes: int
    ask_all: bool = False


def curriculum(facts: int, deep_from: float, single_until: float = 0.0,
               episodes: int = 2) -> tuple[Phase, ...]:
    """One fact per span: shallow, then deep from `deep_from` (episodes=1: never deep).
    Several: one fact alone until `single_until`, then 1..facts facts, every key asked."""
    many, several = tuple(range(1, facts + 1)), facts > 1
    phases = [Phase(single_until, (1,), 1)] if several else []
    if episodes > 1:
        phases.append(Phase(deep_from, many, 1, several))
    phases.append(Phase(1.0, many, episodes, several))
    return tuple(p for p in phases if p.until > 0)


@dataclass
class ProxyTraining:
    steps: int
    seconds: float  # wall clock
    cpu_seconds: float  # this process's CPU time: about the wall time on a quiet machine
    losses: list[float] = field(default_factory=list)  # answer-frame loss per step


def train_proxy(lm: LMModel, phases: Sequence[tuple[float, Iterator[list[TrainingExample]]]],
                steps: int, lr: float, warmup: int = 50,
                on_progress: Callable[[int, float, float], None] | None = None,
                progress_every: int = 100) -> ProxyTraining:
    """AdamW with warm-up and cosine decay over `steps` steps; each step's batch comes from
    the first phase (until-fraction, batches) that has not ended. `on_progress(step, answer
    loss, seconds)` is called every `progress_every` steps (it only reads; the training is
    the same with or without it)."""
    params = [p for p in lm.parameters()]
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    lm.train()
    losses: list[float] = []
    start, cpu_start = time.perf_counter(), time.process_time()
    for step in range(steps):
        progress = step / steps
        scale = min(1.0, (step + 1) / warmup) * 0.5 * (1.0 + math.cos(math.pi * progress))
        for group in optimizer.param_groups:
            group["lr"] = lr * max(scale, 0.02)
        batches = next(b for until, b in phases if progress < until)
        loss, answer_loss = proxy_loss(lm, next(batches))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        losses.append(answer_loss)
        if on_progress and ((step + 1) % progress_every == 0 or step + 1 == steps):
            on_progress(step + 1, answer_loss, time.perf_counter() - start)
    lm.eval()
    for p in params:
        p.requires_grad_(False)
    return ProxyTraining(steps, time.perf_counter() - start, time.process_time() - cpu_start,
                         losses)


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


def teacher_forced_inputs(codes: torch.Tensor, delays: Sequence[int]
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """What each step of a generator is given, from aligned codes [B, 17, T]: the user's
    codes [B, 8, T + 1] and the model's own audio [B, 8, T] (teacher-forced). Any engine's
    evaluation feeds exactly these."""
    # Step s receives user frame s - 1 (codes_from_stream's alignment); step 0's is unseen.
    user = torch.cat([codes[:, 9:17, :1], codes[:, 9:17]], dim=2)  # [B, 8, T + 1]
    # The model's own audio, teacher-forced: the generator takes it as the depformer gives
    # it, in the delayed layout (codebook k of step s is frame s - delay[k]).
    audio = torch.stack([
        torch.roll(codes[:, k], int(delays[k]), dims=1) for k in range(1, 9)
    ], dim=1)  # [B, 8, T]; a rolled-in first column is never read (initial tokens there)
    return user, audio


# One engine's greedy evaluation of B streams: (questions per stream, mode, seed) -> text
# tokens [B, T]. run_streams is torch's; span_proxy_mlx.py has MLX's.
StreamRunner = Callable[[Sequence[Sequence[Question]], str, int], torch.Tensor]


def read_positions(lm: LMModel, ids: Sequence[int], batch: int) -> None:
    """A span's positions as the engine reads them, into every stream: ONE forward."""
    lm.forward_text(positions_codes(lm, ids, batch))


@torch.no_grad()
def run_streams(lm: LMModel, task: ProxyTask, questions: Sequence[Sequence[Question]],
                mode: str, seed: int) -> torch.Tensor:
    """Greedy LMGen over B streams (B = len(questions)); stream b answers questions[b].

    Spans are read as the engine reads span positions, before their frame: one forward pass
    (CHUNKED) or one position at a time. Spans must be the same in every stream at the same
    frame (prefill feeds one span to the whole batch). Returns the text tokens [B, T]."""
    codes, injections = stream_codes(task, questions, seed)
    batch, _, frames = codes.shape
    user, audio = teacher_forced_inputs(codes, lm.delays)
    texts: list[torch.Tensor] = []
    gen = LMGen(lm, use_sampling=False, on_text_hook=lambda t: texts.append(t.clone()))
    longest = max((len(ids) for ids in injections.values()), default=1)
    with gen.streaming(batch):
        widen_attention_rings(lm, longest if mode == CHUNKED else 1)
        for step in range(frames):
            ids = injections.get(step)
            if ids:
                if mode == CHUNKED:
                    read_positions(lm, ids, batch)
                else:
                    for token in ids:
                        read_positions(lm, [token], batch)
            gen.step(user[:, :, step : step + 1],
                     depformer_replace_tokens=audio[:, :, step : step + 1])
    return torch.stack(texts, dim=1)  # [B, T]: text of frame t, chosen at step t


@dataclass
class Score:
    exact: int = 0  # the whole answer ([key echo,] both value words)
    first: int = 0  # the value's first token
    key: int = 0  # the key echo (when the task has one)
    total: int = 0

    def add(self, text: torch.Tensor, questions: Sequence[Sequence[Question]]) -> Score:
        """Count the answers that stream b of `text` [B, T] gave to questions[b]."""
        for b, qs in enumerate(questions):
            for q in qs:
                said = text[b, q.answer_frame : q.answer_frame + len(q.answer_ids)].tolist()
                self.exact += said == list(q.answer_ids)
                self.first += said[q.value_at] == q.answer_ids[q.value_at]
                self.key += said[: q.value_at] == list(q.answer_ids[: q.value_at])
                self.total += 1
        return self

    def report(self, key_echo: bool) -> dict:
        out = {"exact": _frac(self.exact, self.total), "first_token": _frac(self.first, self.total)}
        if key_echo:
            out["key_echo"] = _frac(self.key, self.total)
        return out


def _frac(n: int, d: int) -> float:
    return round(n / max(1, d), 4)


class Evaluation:
    """Every measurement of the report on one split, `questions` fresh questions each; it
    keeps every span it injects, for the overlap check, and every run's text and answers,
    for comparing engines. The questions and streams depend on the seeds only, so two
    engines' evaluations (`runner`: torch's run_streams by default) ask the same ones."""

    def __init__(self, lm: LMModel, task: ProxyTask, questions: int, seed: int,
                 split: str, runner: StreamRunner | None = None) -> None:
        if split not in SPLIT_SEEDS:
            raise ValueError(f"evaluate on one of {sorted(SPLIT_SEEDS)}, not {split!r}")
        self.lm, self.task, self.questions, self.split = lm, task, questions, split
        self.runner: StreamRunner = runner or (
            lambda batch, mode, seed: run_streams(lm, task, batch, mode, seed))
        self.texts: list[torch.Tensor] = []  # every run's text tokens [B, T], in order
        self.answers: list[tuple[int, ...]] = []  # what each run's questions were answered
        self.seed = SPLIT_SEEDS[split] + seed  # stream (random audio) seeds start here
        self.rng = random.Random(self.seed)
        self.other = random.Random(self.seed + 1_000_000)
        self.spans: list[tuple[int, ...]] = []  # the content of every span injected

    def question(self, pairs: int, span_frame: int, distance: int,
                 values_from: random.Random | None = None) -> Question:
        q = self.task.question(self.rng, pairs, span_frame, distance, self.split, values_from)
        self.spans.append(q.content)
        return q

    def run(self, batch: Sequence[Sequence[Question]], mode: str, seed: int) -> torch.Tensor:
        text = self.runner(batch, mode, self.seed + seed)
        self.texts.append(text)
        self.answers.extend(tuple(text[b, q.answer_frame : q.answer_frame + len(q.answer_ids)]
                                  .tolist()) for b, qs in enumerate(batch) for q in qs)
        return text

    def one_fact(self) -> dict:
        """In-distribution questions (one fact): chunked, one at a time, no span, wrong span."""
        scores = {k: Score() for k in ("chunked", "one_at_a_time", "no_span", "wrong_span")}
        same_streams = same_tokens = tokens = 0
        for i in range(self.questions):
            q = self.question(1, self.rng.randint(0, 12), self.rng.randint(0, MAX_DISTANCE))
            wrong = self.task.with_span(q, self.question(1, q.span.frame, 0, self.other))
            chunked = self.run([[q]], CHUNKED, i)
            single = self.run([[q]], ONE_AT_A_TIME, i)
            same_streams += bool(torch.equal(chunked, single))
            same_tokens += int((chunked == single).sum())
            tokens += chunked.numel()
            scores["chunked"].add(chunked, [[q]])
            scores["one_at_a_time"].add(single, [[q]])
            scores["no_span"].add(self.run([[self.task.with_span(q, None)]], CHUNKED, i), [[q]])
            scores["wrong_span"].add(self.run([[wrong]], CHUNKED, i), [[q]])
        out = {k: s.report(self.task.key_echo) for k, s in scores.items()}
        out["one_at_a_time"].update(identical_streams=_frac(same_streams, self.questions),
                                    identical_tokens=_frac(same_tokens, tokens))
        return out

    def distances(self) -> dict:
        """Distances 0 .. 4x the largest trained: one span, one stream per distance."""
        distances = [d * MAX_DISTANCE for d in range(5)]
        scores = {d: Score() for d in distances}
        for i in range(self.questions):
            base = self.question(1, self.rng.randint(0, 12), 0)
            batch = [[replace(base, question_frame=base.span.frame + d)] for d in distances]
            text = self.run(batch, CHUNKED, 10_000 + i)
            for b, d in enumerate(distances):
                scores[d].add(text[b : b + 1], [batch[b]])
        return {str(d): _frac(s.exact, s.total) for d, s in scores.items()}

    def deep(self) -> dict:
        """One long conversation, each span after a gap longer than the context."""
        qs, frame = [], 0
        for e in range(self.questions):
            gap = 300 if e == 0 else self.rng.randint(*DEEP_GAP)
            q = self.question(1, frame + gap, self.rng.randint(0, MAX_DISTANCE))
            qs.append(q)
            frame = q.end_frame
        score = Score().add(self.run([qs], CHUNKED, 20_000), [qs])
        assert self.lm.context is not None, "the proxy runs real Moshi's context window"
        return score.report(self.task.key_echo) | {
            "first_span_frame": qs[0].span.frame, "frames": frame,
            "context": self.lm.context, "window_wraps": frame > self.lm.context}

    def multi_fact(self, pairs: int) -> dict:
        """Spans of `pairs` facts: every key of the span asked, each in its own stream."""
        score, any_value = Score(), 0
        for i in range(max(1, self.questions // pairs)):
            base = self.question(pairs, self.rng.randint(0, 12),
                                 self.rng.randint(0, MAX_DISTANCE))
            batch = [[self.task.ask(base, a)] for a in range(pairs)]
            text = self.run(batch, CHUNKED, 30_000 + i)
            score.add(text, batch)
            starts = {value_ids[0] for _, value_ids in base.facts}
            any_value += sum(int(text[b, qs[0].answer_frame + qs[0].value_at]) in starts
                             for b, qs in enumerate(batch))
        # first_token against 1/P: above it, the question's key selects the fact; a model
        # that reads the span but cannot select says SOME value (any_value_first_token).
        return score.report(self.task.key_echo) | {
            "chance_1_over_p": round(1 / pairs, 4),
            "any_value_first_token": _frac(any_value, score.total), "questions": score.total}


def evaluate(lm: LMModel, task: ProxyTask, questions: int, seed: int, split: str = "eval",
             multi_pairs: Sequence[int] = (2, 4), deep: bool = True, distances: bool = True,
             runner: StreamRunner | None = None) -> tuple[dict, Evaluation]:
    """The report's measurements, and the evaluation (the content of every span it
    injected, every run's text); `runner`: the engine (torch's LMGen by default)."""
    ev = Evaluation(lm, task, questions, seed, split, runner)
    out: dict = {"split": split, "questions_per_measure": questions}
    out.update(ev.one_fact())
    out["value_chance"] = round(1 / len(task.value_words), 4)
    if distances:
        out["distances"] = ev.distances()
        out["max_distance_trained"] = MAX_DISTANCE
    if deep:
        out["deep"] = ev.deep()
    out["multi_fact"] = {str(p): ev.multi_fact(p) for p in multi_pairs}
    return out, ev
