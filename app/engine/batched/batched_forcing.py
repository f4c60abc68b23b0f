"""The forcing generator (forcing_generator.py) streaming B conversations, one per row.

The same bookkeeping as ForcingGenerator, kept per row: the 4-column ring and its
`provided` flags are [B, 17, RING] tensors, and each row has its own offset, pending exit
(the column a block swallowed) and restored text, since conversations join, leave and read
blocks at different frames. A frame is ONE temporal forward over [B, 17, 1] with exec_mask
on the rows that step (the others' KV rings and offsets do not advance), then the depformer
over those rows only (it keeps no state across frames). A block, a conversation start or a
saved voice runs through the transformer for its row alone (row_view.py): n positions at
batch 1, never B rows of n. The depformer step is ForcingGenerator's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import torch
from moshi.models import LMModel
from moshi.utils.compile import CUDAGraphed
from moshi.utils.sampling import sample_token

from app.engine.batched.row_view import prefill_row_positions, row_streaming
from app.engine.forcing_generator import RING, UNGENERATED, ForcedStep, ForcingGenerator
from app.moshi_internals import initial_tokens


@dataclass
class _Row:
    offset: int = 0  # index of the row's next target column
    pending_exit: tuple[int, int] | None = None  # (semantic code, text) a block swallowed
    restored_text: int | None = None


class BatchedForcingGenerator:
    def __init__(self, lm_model: LMModel, use_sampling: bool = True, temp: float = 0.8,
                 temp_text: float = 0.7, top_k: int = 250, top_k_text: int = 25) -> None:
        # Its constants and its depformer step; it never streams itself.
        self._single = ForcingGenerator(lm_model, use_sampling=use_sampling, temp=temp,
                                        temp_text=temp_text, top_k=top_k,
                                        top_k_text=top_k_text)
        self.lm_model = lm_model
        self.use_sampling = use_sampling
        self.temp_text = temp_text
        self.top_k_text = top_k_text
        self.delays = list(lm_model.delays)
        self.max_delay = max(self.delays)
        self.dep_q = lm_model.dep_q
        device = lm_model.device
        self._delays = torch.tensor(self.delays, dtype=torch.long, device=device)
        per_side = lm_model.n_q // 2
        self._agent_rows = torch.arange(1, 1 + per_side, device=device)
        self._user_rows = torch.arange(1 + per_side, lm_model.num_codebooks, device=device)
        self._audio_rows = torch.arange(1, 1 + self.dep_q, device=device)
        self._out_rows = torch.arange(1 + self.dep_q, device=device)
        self._initial = initial_tokens(lm_model)  # [1, 17, 1]
        self.batch_size = 0
        self.ring = torch.empty(0)
        self.provided = torch.empty(0)
        self.rows: list[_Row] = []
        self._graphed_main: CUDAGraphed | None = None  # made when streaming starts

    def streaming(self, batch_size: int) -> ExitStack:
        lm = self.lm_model
        self.batch_size = batch_size
        self.ring = torch.full((batch_size, lm.num_codebooks, RING), UNGENERATED,
                               dtype=torch.long, device=lm.device)  # [B, 17, RING]
        self.provided = torch.zeros_like(self.ring, dtype=torch.bool)  # [B, 17, RING]
        self.rows = [_Row() for _ in range(batch_size)]
        self._graphed_main = CUDAGraphed(lm.forward_text, disable=lm.device.type != "cuda")
        stack = ExitStack()
        stack.enter_context(lm.streaming(batch_size))
        return stack

    def _mask(self, rows: Sequence[int]) -> torch.Tensor:
        mask = torch.zeros(self.batch_size, dtype=torch.bool, device=self.lm_model.device)
        mask[list(rows)] = True
        return mask

    def reset_row(self, row: int) -> None:
        self.ring[row].fill_(UNGENERATED)
        self.provided[row].fill_(False)
        self.rows[row] = _Row()
        self.lm_model.reset_streaming(self._mask([row]))

    def restored_text(self, row: int) -> int | None:
        return self.rows[row].restored_text

    # ---- one row's bookkeeping (ForcingGenerator._prepare, for row `row`) ----------------

    def _write_rows(self, row: int, rows: torch.Tensor, values: torch.Tensor) -> None:
        columns = (self.rows[row].offset + self._delays[rows]) % RING  # [K]
        self.ring[row, rows, columns] = values.reshape(-1).to(self.ring.dtype)
        self.provided[row, rows, columns] = True

    def _prepare(self, row: int, user: torch.Tensor | None, agent: torch.Tensor | None,
                 text: int | None) -> tuple[int, int] | None:
        state = self.rows[row]
        if user is not None:
            self._write_rows(row, self._user_rows, user)
        if agent is not None:
            self._write_rows(row, self._agent_rows, agent)
        if text is not None:
            column = (state.offset + self.delays[0]) % RING
            self.ring[row, 0, column] = text
            self.provided[row, 0, column] = True
        young = [k for k, delay in enumerate(self.delays) if state.offset <= delay]
        if young:
            ks = torch.tensor(young, device=self.ring.device)
            column = state.offset % RING
            self.ring[row, ks, column] = self._initial[0, ks, 0]
            self.provided[row, ks, column] = True
        if state.offset == 0:
            self.ring[row, :, 0] = self._initial[0, :, 0]
            state.offset = 1
            return None
        return (state.offset - 1) % RING, state.offset % RING

    # ---- one frame for many rows ---------------------------------------------------------

    @torch.no_grad()
    def step(self, rows: Sequence[int], user: torch.Tensor,
             text: Sequence[int | None]) -> list[torch.Tensor | None]:
        stepping: list[int] = []
        inputs: list[int] = []
        targets: list[int] = []
        for i, row in enumerate(rows):
            prepared = self._prepare(row, user[i], None, text[i])
            if prepared is not None:
                stepping.append(row)
                inputs.append(prepared[0])
                targets.append(prepared[1])
        results: dict[int, torch.Tensor | None] = dict.fromkeys(rows)
        if stepping:
            self._forward_rows(stepping, inputs, targets, results)
        return [results[row] for row in rows]

    def _forward_rows(self, stepping: list[int], inputs: list[int], targets: list[int],
                      results: dict[int, torch.Tensor | None]) -> None:
        device = self.ring.device
        idx = torch.tensor(stepping, device=device)  # [A]
        input_col = torch.tensor(inputs, device=device)  # [A]
        target_col = torch.tensor(targets, device=device)  # [A]
        # Rows that do not step read the initial column; exec_mask keeps them where they are.
        batch_input = self._initial.expand(self.batch_size, -1, -1).clone()  # [B, 17, 1]
        batch_input[idx, :, 0] = self.ring[idx, :, input_col]  # [A, 17]
        self.lm_model.set_exec_mask(self._mask(stepping))
        assert self._graphed_main is not None
        transformer_out, text_logits = self._graphed_main(batch_input)  # [B, 1, dim], logits
        sampled_text = sample_token(text_logits[idx].float(), self.use_sampling, self.temp_text,
                                    self.top_k_text)[:, 0, 0]  # [A]
        target = self.ring[idx, :, target_col]  # [A, 17]
        given = self.provided[idx, :, target_col]  # [A, 17]
        next_text = torch.where(given[:, 0], target[:, 0], sampled_text)
        audio = slice(1, 1 + self.dep_q)
        sampled_audio = self._single._depformer_step(
            next_text, transformer_out[idx], target[:, audio], given[:, audio])  # [A, dep_q]
        self.provided[idx, :, input_col] = False
        self.ring[idx, 0, target_col] = next_text
        self.ring[idx[:, None], self._audio_rows[None, :], target_col[:, None]] = torch.where(
            given[:, audio], target[:, audio], sampled_audio)
        for row in stepping:
            state = self.rows[row]
            if state.offset <= self.max_delay:
                state.offset += 1
                continue
            columns = (state.offset - self.max_delay + self._delays[: 1 + self.dep_q]) % RING
            out = self.ring[row, self._out_rows, columns].clone()  # [1 + dep_q]
            state.offset += 1
            state.restored_text = None
            if state.pending_exit is not None:
                semantic, swallowed = state.pending_exit
                out[1] = semantic  # the swallowed frame, played with its own semantic code
                state.restored_text = swallowed
                state.pending_exit = None
            results[row] = out

    # ---- many columns for one row --------------------------------------------------------

    def prefill_positions(self, row: int, token_ids: Sequence[int]) -> None:
        """Spans as positions (a checkpoint that names that placement): the row's
        transformer only, its ring and offset left alone, as ForcingGenerator's reader."""
        prefill_row_positions(self.lm_model, row, token_ids)

    @torch.no_grad()
    def prefill_forced(self, row: int, steps: Sequence[ForcedStep],
                       max_columns: int | None = None) -> int:
        device = self.ring.device
        columns: list[torch.Tensor] = []
        for forced in steps:
            prepared = self._prepare(row, torch.tensor(forced.user, device=device),
                                     torch.tensor(forced.agent, device=device), forced.text)
            if prepared is None:
                continue
            input_column, target_column = prepared
            if not bool(self.provided[row, :, target_column].all()):
                raise ValueError("a forced step must give every row")
            columns.append(self.ring[row, :, input_column].clone())
            self.provided[row, :, input_column] = False
            self.rows[row].offset += 1
        if columns:
            sequence = torch.stack(columns, dim=1)[None]  # [1, 17, N]
            size = max_columns or sequence.shape[-1]
            with row_streaming(self.lm_model, row):
                for start in range(0, sequence.shape[-1], size):
                    self.lm_model.forward_text(sequence[:, :, start : start + size])
        return len(columns)

    def can_inject_block(self, row: int) -> bool:
        return self.rows[row].offset >= self.max_delay + 2

    @torch.no_grad()
    def inject_block(self, row: int, block: torch.Tensor) -> int:
        if not self.can_inject_block(row):
            raise RuntimeError("a block cannot go in before the first frame")
        n = int(block.shape[-1])
        if n == 0:
            return 0
        state = self.rows[row]
        pending = (state.offset - 1) % RING
        if state.pending_exit is None:
            state.pending_exit = (int(self.ring[row, 1, pending]), int(self.ring[row, 0, pending]))
        block = block.to(device=self.ring.device, dtype=torch.long)  # [17, n]
        previous = self.ring[row, :, pending : pending + 1].clone()  # [17, 1]
        sequence = torch.cat([previous, block[:, : n - 1]], dim=1)[None]  # [1, 17, n]
        with row_streaming(self.lm_model, row):
            self.lm_model.forward_text(sequence)
        for j in range(max(0, n - RING), n):  # the ring's view of the newest block columns
            column = (state.offset + j) % RING
            self.ring[row, :, column] = block[:, j]
            self.provided[row, :, column] = False
        state.offset += n
        self.provided[row, :, state.offset % RING] = False
        return n

    @torch.no_grad()
    def replay_embeddings(self, row: int, embeddings: torch.Tensor,
                          saved_ring: torch.Tensor) -> int:
        state = self.rows[row]
        if state.offset != 0:
            raise RuntimeError("a saved voice prompt starts a conversation")
        lm = self.lm_model
        frames = embeddings.shape[0]
        x = embeddings.reshape(frames, -1, embeddings.shape[-1])[:, 0, :]  # [N, dim]
        x = x.to(device=lm.device, dtype=lm.dtype)[None]  # [1, N, dim]
        with row_streaming(lm, row):
            lm.transformer(x)
        ring = saved_ring.to(self.ring.device).reshape(-1, *saved_ring.shape[-2:])
        if ring.shape[-1] != RING or ring.shape[-2] != lm.num_codebooks:
            raise ValueError(f"a saved voice ring of shape {tuple(saved_ring.shape)} does "
                             f"not fit this generator ([B, {lm.num_codebooks}, {RING}])")
        self.ring[row] = ring[0]
        self.provided[row].fill_(False)
        for k, delay in enumerate(self.delays):
            self.provided[row, k, (frames + delay) % RING] = True
        state.offset = frames + 1
        return frames
