"""The generator PersonaPlex and its fine-tunes were trained with, on stock moshi's LMModel.

Stock moshi's `LMGen` cannot drive these checkpoints as they were trained: it cannot force
the model's own rows (text and audio) frame by frame, it samples only `dep_q` depformer
steps as the model's audio (with dep_q 16 the user's 8 codebooks are silently dropped), and
it cannot take a block of positions into its token ring. This generator keeps the reference
generator's bookkeeping, written from its behaviour:

- A ring of 4 columns of the 17-row sequence (row 0 text, rows 1-8 the model's Mimi codes,
  rows 9-16 the user's), with a `provided` flag per cell, and `offset` = the index of the
  next *target* column. Column c holds frame c's text and semantic codes and frame c-1's
  acoustic codes (acoustic rows are delayed by one).
- `step(user, agent=None, text=None)` writes each given row k into column offset + delay[k]
  and marks it provided; the user frame therefore lands in the target column. At offset 0 it
  only seeds column 0 with the initial tokens. Otherwise ONE temporal forward over column
  offset - 1 predicts column offset: the text is sampled (the provided value is what the
  depformer sees, if any), then the depformer runs all `dep_q` steps, each fed the provided
  value where there is one (teacher forcing) else its own sample. Sampled values are written
  only where nothing was provided, so with dep_q 16 a missing user frame is model-sampled.
  The returned frame is column offset - 1's text and semantic code with column offset's
  acoustic codes: the model's frame offset - 1, one frame behind the user frame just given.
- `prefill_forced(steps)` applies a run of fully forced steps (a conversation's prefix) with
  the same bookkeeping and ONE forward over their input columns.
- `inject_block(block)` reads a span block: ONE forward over [pending column] + block[:n-1],
  the last block columns written into the ring, offset advanced by n. The first frame out
  after it carries the block's closing column; its semantic code is replaced by the pending
  column's, so the frame the block swallowed is still played and no frame is lost.

Everything runs on `LMModel.forward_text` and `LMModel.forward_depformer`; the step's two
calls are CUDA-graphed like stock LMGen's, and the multi-position forwards go through
position_forwards.py (padded to a few graphed sizes) on the same state tensors,
updated in place, so all the graphs stay valid for each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from types import TracebackType

import torch
from moshi.models import LMModel
from moshi.modules.streaming import State, StreamingModule
from moshi.utils.compile import CUDAGraphed
from moshi.utils.sampling import sample_token

from app.engine.position_forwards import PositionForwards
from app.moshi_internals import initial_tokens, streaming_state

RING = 4  # columns kept: the input, the target, the target's delayed rows, one spare
UNGENERATED = -2  # moshi's "nothing here yet"


@dataclass(frozen=True)
class ForcedStep:
    """One frame whose rows are all given: user [8], agent [8] codes and the text id."""

    user: tuple[int, ...]
    agent: tuple[int, ...]
    text: int


@dataclass
class _ForcingState(State):
    ring: torch.Tensor  # [B, 17, RING] long
    provided: torch.Tensor  # [B, 17, RING] bool
    initial: torch.Tensor  # [1, 17, 1] long: moshi's initial tokens
    graphed_main: CUDAGraphed
    graphed_depth: CUDAGraphed
    forwards: PositionForwards  # blocks and the prefix: many positions per forward
    offset: int = 0  # index of the next target column
    # After a block: the swallowed column's semantic code and text ([B] each), restored on
    # the next frame out. Kept from the first of two adjacent blocks.
    pending_exit: tuple[torch.Tensor, torch.Tensor] | None = None
    restored_text: torch.Tensor | None = None  # the swallowed text, for the transcript
    condition_sum: None = None  # no conditioning: the injector's positions path reads these
    condition_cross: None = None
    exit_stack: ExitStack = field(default_factory=ExitStack)
    lm_model: LMModel | None = None

    def reset(self, reset_mask: torch.Tensor) -> None:
        super().reset(reset_mask)
        self.ring.fill_(UNGENERATED)
        self.provided.fill_(False)
        self.offset = 0
        self.pending_exit = None
        self.restored_text = None
        if self.lm_model is not None:
            self.lm_model.reset_streaming()

    def __enter__(self) -> None:
        self.exit_stack.__enter__()

    def __exit__(self, exc_type: type[BaseException] | None, exc_value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.exit_stack.__exit__(exc_type, exc_value, traceback)


class ForcingGenerator(StreamingModule[_ForcingState]):
    # Read by the positions-placement injector (span_injector.span_positions): no CFG here.
    cfg_coef = 1.0
    cfg_is_no_text = False

    def __init__(
        self,
        lm_model: LMModel,
        use_sampling: bool = True,
        temp: float = 0.8,
        temp_text: float = 0.7,
        top_k: int = 250,
        top_k_text: int = 25,
    ) -> None:
        assert not lm_model.training, "generation needs the model in eval mode"
        super().__init__()
        self.lm_model = lm_model
        lm_model.set_streaming_detached(True)
        self.use_sampling = use_sampling
        self.temp = temp
        self.temp_text = temp_text
        self.top_k = top_k
        self.top_k_text = top_k_text
        self.delays = list(lm_model.delays)
        self.max_delay = max(self.delays)
        self.dep_q = lm_model.dep_q
        self.audio_per_side = lm_model.n_q // 2  # 8 agent rows, then 8 user rows
        device = lm_model.device
        self._delays = torch.tensor(self.delays, dtype=torch.long, device=device)
        # Rows grouped by delay, so a frame's given rows are written in one indexed store.
        self._agent_rows = torch.arange(1, 1 + self.audio_per_side, device=device)
        self._user_rows = torch.arange(1 + self.audio_per_side, lm_model.num_codebooks,
                                       device=device)

    # ---- streaming state ---------------------------------------------------------------

    def _init_streaming_state(self, batch_size: int) -> _ForcingState:
        lm = self.lm_model
        device = lm.device
        ring = torch.full((batch_size, lm.num_codebooks, RING), UNGENERATED, dtype=torch.long,
                          device=device)
        provided = torch.zeros_like(ring, dtype=torch.bool)
        disable = device.type != "cuda"
        state = _ForcingState(
            batch_size, device, ring, provided, initial_tokens(lm),
            CUDAGraphed(lm.forward_text, disable=disable),
            CUDAGraphed(self._depformer_step, disable=disable),
            PositionForwards(lm),
            lm_model=lm,
        )
        state.exit_stack.enter_context(lm.streaming(batch_size))
        return state

    @property
    def state(self) -> _ForcingState:
        state = streaming_state(self)
        if state is None:
            raise RuntimeError("the generator is not streaming")
        return state

    @property
    def offset(self) -> int:
        return self.state.offset

    # ---- one frame -----------------------------------------------------------------------

    def _write_rows(self, rows: torch.Tensor, values: torch.Tensor) -> None:
        """Write given rows ([B, K] values) at offset + their delay; mark them provided."""
        state = self.state
        columns = (state.offset + self._delays[rows]) % RING  # [K]
        state.ring[:, rows, columns] = values.to(state.ring.dtype)
        state.provided[:, rows, columns] = True

    def _prepare(self, user: torch.Tensor | None, agent: torch.Tensor | None,
                 text: torch.Tensor | None) -> tuple[int, int] | None:
        """The reference's step preparation. Returns (input column, target column), or None
        at offset 0, where only the initial column is written."""
        state = self.state
        if user is not None:
            self._write_rows(self._user_rows, user.reshape(state.batch_size, -1))
        if agent is not None:
            self._write_rows(self._agent_rows, agent.reshape(state.batch_size, -1))
        if text is not None:
            column = (state.offset + self.delays[0]) % RING
            state.ring[:, 0, column] = text.reshape(state.batch_size).to(state.ring.dtype)
            state.provided[:, 0, column] = True
        # Rows whose delay has not passed yet read the initial token.
        young = [k for k, delay in enumerate(self.delays) if state.offset <= delay]
        if young:
            rows = torch.tensor(young, device=state.ring.device)
            column = state.offset % RING
            state.ring[:, rows, column] = state.initial[0, rows, 0]
            state.provided[:, rows, column] = True
        if state.offset == 0:
            state.ring[:, :, 0] = state.initial[:, :, 0]
            state.offset = 1
            return None
        return (state.offset - 1) % RING, state.offset % RING

    def _depformer_step(self, text_token: torch.Tensor, transformer_out: torch.Tensor,
                        targets: torch.Tensor, provided: torch.Tensor) -> torch.Tensor:
        """All dep_q depformer steps; each is fed the provided code where there is one.
        text_token [B], transformer_out [B, 1, dim], targets/provided [B, dep_q]."""
        lm = self.lm_model
        batch = text_token.shape[0]
        previous = text_token
        sampled: list[torch.Tensor] = []
        with lm.depformer.streaming(batch):
            for index in range(self.dep_q):
                logits = lm.forward_depformer(index, previous[:, None, None], transformer_out)
                token = sample_token(logits.float(), self.use_sampling, self.temp,
                                     self.top_k)[:, 0, 0]  # [B]
                sampled.append(token)
                previous = torch.where(provided[:, index], targets[:, index], token)
        return torch.stack(sampled, dim=1)  # [B, dep_q]

    @torch.no_grad()
    def step(self, input_tokens: torch.Tensor | None = None,
             moshi_tokens: torch.Tensor | None = None,
             text_token: torch.Tensor | None = None) -> torch.Tensor | None:
        """One frame. input_tokens [B, 8, 1]: the user's codes; moshi_tokens [B, 8, 1] and
        text_token [B] force the model's own rows. Returns [B, 1 + dep_q, 1] (text, the
        model's 8 codes, then the user's when dep_q is 16) or None while the delays fill."""
        state = self.state
        prepared = self._prepare(input_tokens, moshi_tokens, text_token)
        if prepared is None:
            return None
        input_column, target_column = prepared
        input_ = state.ring[:, :, input_column : input_column + 1]  # [B, 17, 1]
        transformer_out, text_logits = state.graphed_main(input_)
        sampled_text = sample_token(text_logits.float(), self.use_sampling, self.temp_text,
                                    self.top_k_text)[:, 0, 0]  # [B]
        target = state.ring[:, :, target_column]  # [B, 17]
        given = state.provided[:, :, target_column]  # [B, 17]
        next_text = torch.where(given[:, 0], target[:, 0], sampled_text)
        audio_rows = slice(1, 1 + self.dep_q)
        sampled_audio = state.graphed_depth(next_text, transformer_out,
                                            target[:, audio_rows], given[:, audio_rows])
        state.provided[:, :, input_column] = False
        state.ring[:, 0, target_column] = torch.where(given[:, 0], target[:, 0], sampled_text)
        state.ring[:, audio_rows, target_column] = torch.where(
            given[:, audio_rows], target[:, audio_rows], sampled_audio)
        if state.offset <= self.max_delay:
            state.offset += 1
            return None
        columns = (state.offset - self.max_delay + self._delays[: 1 + self.dep_q]) % RING
        out = state.ring[:, torch.arange(1 + self.dep_q, device=columns.device), columns]
        out = out[:, :, None].clone()  # [B, 1 + dep_q, 1]
        state.offset += 1
        state.restored_text = None
        if state.pending_exit is not None:
            semantic, text = state.pending_exit
            out[:, 1, 0] = semantic  # the swallowed frame, played with its own semantic code
            state.restored_text = text
            state.pending_exit = None
        return out

    # ---- many columns in one forward -------------------------------------------------------

    @torch.no_grad()
    def prefill_forced(self, steps: Sequence[ForcedStep], max_columns: int | None = None
                       ) -> int:
        """Apply fully forced steps with `step`'s bookkeeping; forward their input columns
        in one pass (in pieces of `max_columns` when given). Returns the columns forwarded."""
        state = self.state
        device = state.ring.device
        columns: list[torch.Tensor] = []
        for forced in steps:
            user = torch.tensor(forced.user, dtype=torch.long, device=device)
            agent = torch.tensor(forced.agent, dtype=torch.long, device=device)
            text = torch.tensor([forced.text], dtype=torch.long, device=device)
            prepared = self._prepare(user.expand(state.batch_size, -1),
                                     agent.expand(state.batch_size, -1),
                                     text.expand(state.batch_size))
            if prepared is None:
                continue
            input_column, target_column = prepared
            if not bool(state.provided[:, :, target_column].all()):
                raise ValueError("a forced step must give every row")
            columns.append(state.ring[:, :, input_column : input_column + 1].clone())
            state.provided[:, :, input_column] = False
            state.offset += 1
        if columns:
            sequence = torch.cat(columns, dim=2)  # [B, 17, N]
            size = max_columns or sequence.shape[-1]
            for start in range(0, sequence.shape[-1], size):
                state.forwards(sequence[:, :, start : start + size])
        return len(columns)

    def can_inject_block(self) -> bool:
        """A block needs a pending column that is a real frame (the first frame out exists)."""
        return self.state.offset >= self.max_delay + 2

    @torch.no_grad()
    def inject_block(self, block: torch.Tensor, positions_per_forward: int | None = None
                     ) -> int:
        """Read a span block [17, n] (text ids in row 0, placeholder codes elsewhere) in ONE
        forward after the pending column. Returns n. `positions_per_forward` splits the
        forward (1: one position at a time), only to prove the single forward equal to it."""
        state = self.state
        if not self.can_inject_block():
            raise RuntimeError("a block cannot go in before the first frame")
        n = int(block.shape[-1])
        if n == 0:
            return 0
        pending = (state.offset - 1) % RING
        if state.pending_exit is None:
            state.pending_exit = (state.ring[:, 1, pending].clone(),
                                  state.ring[:, 0, pending].clone())
        block = block.to(device=state.ring.device, dtype=torch.long)
        block = block[None].expand(state.batch_size, -1, -1)  # [B, 17, n]
        previous = state.ring[:, :, pending : pending + 1].clone()
        sequence = torch.cat([previous, block[:, :, : n - 1]], dim=2)  # [B, 17, n]
        if positions_per_forward is None:
            state.forwards(sequence)  # one read (padded to a graphed size on a GPU)
        else:
            for start in range(0, n, positions_per_forward):
                self.lm_model.forward_text(sequence[:, :, start : start + positions_per_forward])
        for j in range(max(0, n - RING), n):  # the ring's view of the newest block columns
            column = (state.offset + j) % RING
            state.ring[:, :, column] = block[:, :, j]
            state.provided[:, :, column] = False
        state.offset += n
        state.provided[:, :, state.offset % RING] = False
        return n

    @torch.no_grad()
    def replay_embeddings(self, embeddings: torch.Tensor, saved_ring: torch.Tensor) -> int:
        """A PersonaPlex `.pt` voice prompt: the per-frame input embeddings its server saved
        ([N, ..., dim]) go through the temporal transformer in one pass, and the ring is set
        to the one it saved after them. Must start a fresh stream. Returns N."""
        state = self.state
        if state.offset != 0:
            raise RuntimeError("a saved voice prompt starts a conversation")
        lm = self.lm_model
        frames = embeddings.shape[0]
        x = embeddings.reshape(frames, -1, embeddings.shape[-1])[:, 0, :]  # [N, dim]
        x = x.to(device=lm.device, dtype=lm.dtype)[None].expand(state.batch_size, -1, -1)
        lm.transformer(x)
        ring = saved_ring.to(state.ring.device).reshape(-1, *saved_ring.shape[-2:])
        if ring.shape[-1] != RING or ring.shape[-2] != lm.num_codebooks:
            raise ValueError(f"a saved voice ring of shape {tuple(saved_ring.shape)} does "
                             f"not fit this generator ([B, {lm.num_codebooks}, {RING}])")
        state.ring.copy_(ring[:1].expand_as(state.ring))
        # As after the N forced steps the embeddings stand for (they follow the offset-0
        # seeding step): the last frame's rows stay given where its delays put them, so
        # its acoustic codes in the next column are not resampled.
        state.provided.fill_(False)
        for row, delay in enumerate(self.delays):
            state.provided[:, row, (frames + delay) % RING] = True
        state.offset = frames + 1
        return frames
