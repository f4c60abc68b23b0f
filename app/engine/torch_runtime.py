"""The framework seam on torch: moshi's `LMModel` streaming B conversations, one per row.

A frame is ONE temporal forward over [B, 17, 1] with exec_mask on the rows that step (the
others' KV rings and offsets do not advance), CUDA-graphed at B; then the depformer over all
B rows (it keeps no state across frames; the rows that did not step are computed and
dropped), graphed once: its dep_q codebook steps in fixed slots (depformer_step.py, moshi's
logits in fewer operators). With `compile_step` both are compiled by torch.compile inside
their graphs (step_compile.py; the temporal forward as temporal_step.py's pieces). A read of
n positions (a span's positions or block, a conversation start) runs for its row alone:
at B = 1 on the LM's own state, at B > 1 on ONE batch-1 copy of the state shared by every row
(moshi_internals.RowScratch: the row loaded in, what the read wrote stored back): n
positions at batch 1, never B rows of n. On a GPU a read is ONE forward padded to a graphed
size (position_forwards.py), and those graphs, captured on the shared copy, serve every row:
the engine captures 2 + (padded sizes) graphs whatever its number of rows (`graph_count`).
With one row, this is the single-conversation engine's path exactly: no exec mask, no copy,
the step and the padded reads graphed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager

import numpy as np
import numpy.typing as npt
import torch
from moshi.models import LMModel
from moshi.utils.compile import CUDAGraphed
from moshi.utils.sampling import sample_token

from app.engine.columns import LmLayout, StepColumns
from app.engine.depformer_step import DepformerSteps, codebook_step, unsupported
from app.engine.device import synchronize
from app.engine.kv_ring import widen_attention_rings
from app.engine.lm_runtime import GraphCount, Sampling
from app.engine.position_forwards import PositionForwards, widest_forward
from app.engine.step_compile import CompiledPiece, Notify, StepCompile
from app.engine.temporal_step import TemporalStep, layer_step
from app.engine.temporal_step import finish as temporal_finish
from app.engine.temporal_step import setup as temporal_setup
from app.engine.temporal_step import unsupported as temporal_unsupported
from app.moshi_internals import RowScratch, graph_captured, initial_tokens

log = logging.getLogger(__name__)


def layout_of(lm: LMModel) -> LmLayout:
    initial = initial_tokens(lm)[0, :, 0].tolist()
    return LmLayout(tuple(int(d) for d in lm.delays), int(lm.dep_q), int(lm.n_q),
                    int(initial[0]), int(initial[1]))


DepformerCall = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
TemporalCall = Callable[..., tuple[torch.Tensor, torch.Tensor]]  # forward_text, or ours


class TorchRuntime:
    def __init__(self, lm: LMModel, sampling: Sampling, padded: bool | None = None,
                 compile_step: bool = False, notify: Notify | None = None) -> None:
        """`padded`: None, reads padded to graphed sizes where CUDA graphs work; True,
        padded always (graphed only on CUDA: tests of the padding on a CPU).
        `compile_step`: the step (its temporal forward and its depformer) compiled by
        torch.compile on its first call (the warm-up); `notify` hears what the compile is
        doing (it takes a while)."""
        assert not lm.training, "generation needs the model in eval mode"
        self._padded = padded
        self._compile_step = compile_step
        self._notify = notify
        self.lm = lm
        self.sampling = sampling
        self.layout = layout_of(lm)
        self.context = int(lm.context or 0)
        self.text_padding_id = int(lm.text_padding_token_id)
        self.device = lm.device
        self.device_label = str(lm.device)
        lm.set_streaming_detached(True)
        self._rows = 0
        self._initial = initial_tokens(lm)[0, :, 0].cpu().numpy()  # [17]
        self._dep_q = int(lm.dep_q)
        self._no_graph = lm.device.type != "cuda"
        self._main: CUDAGraphed | None = None
        self._depth: CUDAGraphed | None = None  # the depformer, at B rows
        self._depformer: DepformerCall | None = None  # what _depth runs
        self._compile: StepCompile | None = None  # what torch.compile compiles (compile_step)
        self._reads: PositionForwards | None = None  # every row's (each size graphed once)
        self._scratch: RowScratch | None = None  # B > 1: the state a row's read runs on

    # ---- streaming -----------------------------------------------------------------------

    @contextmanager
    def streaming(self, rows: int, max_read: int) -> Iterator[None]:
        lm = self.lm
        with ExitStack() as stack:
            stack.enter_context(lm.streaming(rows))
            self._rows = rows
            # Room for the widest read: on a GPU a read is padded to a graphed size.
            widen_attention_rings(lm, widest_forward(lm, max_read, padded=self._padded))
            self._compile = StepCompile(self.device, self._notify) \
                if self._compile_step else None
            self._main = CUDAGraphed(self._temporal_for(), disable=self._no_graph)
            self._depformer = self._depformer_for(rows)
            self._depth = CUDAGraphed(self._depformer, disable=self._no_graph)
            self._reads = PositionForwards(lm, padded=self._padded)
            self._scratch = RowScratch(lm.transformer) if rows > 1 else None
            try:
                yield
            finally:
                self._main, self._depth, self._reads, self._scratch = None, None, None, None
                self._depformer = None

    def _temporal_for(self) -> TemporalCall:
        """The step's temporal forward: moshi's forward_text; compiled if asked (its setup,
        one layer for all, its finish: temporal_step.py), where the architecture allows."""
        lm, group = self.lm, self._compile
        if group is None:
            return lm.forward_text
        reason = temporal_unsupported(lm)
        if reason is not None:
            log.warning("the temporal step runs uncompiled: %s", reason)
            return lm.forward_text
        return TemporalStep(lm, group.piece(temporal_setup, "temporal step's setup", "temporal"),
                            group.piece(layer_step, "temporal layer", "temporal"),
                            group.piece(temporal_finish, "temporal step's end", "temporal"))

    def _depformer_for(self, rows: int) -> DepformerCall:
        """The depformer's steps for a frame at `rows` rows: in fixed slots where its
        architecture allows (all of moshi's and ours do), each codebook step compiled if
        asked; else moshi's streaming path."""
        reason = unsupported(self.lm)
        if reason is not None:
            if self._compile is not None:
                log.warning("the depformer step runs uncompiled: %s", reason)
            return self._depformer_step
        if self._compile is None:
            return DepformerSteps(self.lm, self.sampling, rows)
        return DepformerSteps(self.lm, self.sampling, rows,
                              self._compile.piece(codebook_step, "depformer step", "depformer"))

    def compiled_pieces(self) -> list[CompiledPiece]:
        """The step's pieces torch.compile was asked for (none without `compile_step`)."""
        return [] if self._compile is None else list(self._compile.pieces)

    def step_compile(self) -> StepCompile | None:
        """What compiling the step took (None without `compile_step`)."""
        return self._compile

    @torch.no_grad()
    def reset_row(self, row: int) -> None:
        if self._rows == 1:
            self.lm.reset_streaming()
        else:
            self.lm.reset_streaming(self._mask([row]))

    def _mask(self, rows: Sequence[int]) -> torch.Tensor:
        mask = torch.zeros(self._rows, dtype=torch.bool, device=self.device)
        mask[list(rows)] = True
        return mask

    @contextmanager
    def _row(self, row: int, positions: int) -> Iterator[None]:
        """The LM streams row `row` alone while open, for a read of `positions` (B = 1: it
        already does; B > 1: on the shared copy of the state)."""
        if self._scratch is None:
            yield
            return
        with self._scratch.holding(row, positions):
            yield

    def row_reading(self) -> int | None:
        """The row a read runs for now (B > 1; tests record what each row was fed)."""
        return None if self._scratch is None else self._scratch.row

    # ---- one frame -----------------------------------------------------------------------

    def _depformer_step(self, text_token: torch.Tensor, transformer_out: torch.Tensor,
                        targets: torch.Tensor, provided: torch.Tensor) -> torch.Tensor:
        """All dep_q depformer steps through moshi's streaming depformer (where
        depformer_step.py cannot run it); each is fed the provided code where there is one.
        text_token [A], transformer_out [A, 1, dim], targets/provided [A, dep_q]."""
        lm, s = self.lm, self.sampling
        previous = text_token
        sampled: list[torch.Tensor] = []
        with lm.depformer.streaming(text_token.shape[0]):
            for index in range(self._dep_q):
                logits = lm.forward_depformer(index, previous[:, None, None], transformer_out)
                token = sample_token(logits.float(), not s.greedy, s.temp, s.top_k)[:, 0, 0]
                sampled.append(token)  # [A]
                previous = torch.where(provided[:, index], targets[:, index], token)
        return torch.stack(sampled, dim=1)  # [A, dep_q]

    @torch.no_grad()
    def step(self, rows: Sequence[int], columns: Sequence[StepColumns]
             ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        assert self._main is not None and self._depth is not None, "not streaming"
        # Every row's input, target and provided flags [B, 3, 17]: a row that does not
        # step reads the initial column (exec_mask keeps its state in place) and its
        # depformer output is dropped. One copy to the device.
        packed = np.zeros((self._rows, 3, self.layout.num_codebooks), dtype=np.int64)
        packed[:, 0] = self._initial
        for row, c in zip(rows, columns, strict=True):
            packed[row] = (c.input, c.target, c.provided)
        given = torch.from_numpy(packed).to(self.device)
        inputs, targets, provided = given[:, 0], given[:, 1], given[:, 2].bool()  # [B, 17]
        if self._rows > 1:
            self.lm.set_exec_mask(self._mask(rows))
        transformer_out, text_logits = self._main(inputs[:, :, None])  # [B,1,dim], [B,1,1,card]
        index = torch.tensor(list(rows), device=self.device)
        s = self.sampling
        text = sample_token(text_logits[index].float(), not s.greedy, s.temp_text,
                            s.top_k_text)[:, 0, 0]  # [A]
        next_text = torch.zeros(self._rows, dtype=torch.long, device=self.device)
        next_text[index] = torch.where(provided[index, 0], targets[index, 0], text)
        audio_rows = slice(1, 1 + self._dep_q)
        audio = self._depth(next_text, transformer_out, targets[:, audio_rows],
                            provided[:, audio_rows])[index]  # [A, dep_q]
        if self._compile is not None:  # a whole step ran: every graph it needs is compiled
            self._compile.settle()
        out = torch.cat([text[:, None], audio], dim=1).cpu().numpy()  # [A, 1 + dep_q]
        return out[:, 0], out[:, 1:]

    # ---- many positions for one row -------------------------------------------------------

    @torch.no_grad()
    def _read(self, row: int, columns: npt.NDArray[np.int64]) -> torch.Tensor:
        assert self._reads is not None, "the runtime is not streaming"
        codes = torch.from_numpy(np.ascontiguousarray(columns, dtype=np.int64))
        with self._row(row, int(columns.shape[-1])):
            return self._reads(codes.to(self.device)[None])  # [1, 17, n] -> [1, n, dim]

    def read(self, row: int, columns: npt.NDArray[np.int64]) -> None:
        if columns.shape[-1]:
            self._read(row, columns)

    def read_outputs(self, row: int, columns: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        return self._read(row, columns)[0].float().cpu().numpy()

    @torch.no_grad()
    def replay_embeddings(self, row: int, embeddings: object) -> None:
        assert isinstance(embeddings, torch.Tensor)
        lm = self.lm
        frames = embeddings.shape[0]
        x = embeddings.reshape(frames, -1, embeddings.shape[-1])[:, 0, :]  # [N, dim]
        with self._row(row, frames):
            lm.transformer(x.to(device=lm.device, dtype=lm.dtype)[None])  # [1, N, dim]

    def reads_run(self) -> int:
        """Forwards the reads ran, every row's (tests and benchmarks)."""
        assert self._reads is not None, "the runtime is not streaming"
        return self._reads.forward_count

    def read_sizes(self) -> list[int]:
        """The padded sizes the reads met (each graphed once, for every row, on a GPU)."""
        assert self._reads is not None, "the runtime is not streaming"
        return self._reads.sizes()

    def graph_count(self) -> GraphCount:
        """The CUDA graphs this runtime holds (captured on a GPU, counted on a CPU where
        reads are padded): the step's two and one per padded read size met, whatever the
        number of rows; each has its memory pool (moshi's CUDAGraphed)."""
        graphs = [g for g in (self._main, self._depth) if g is not None]
        reads = self._reads.sizes() if self._reads is not None and self._reads.uses_padding() \
            else []
        return GraphCount(step=len(graphs), reads=len(reads),
                          scratch_bytes=0 if self._scratch is None else self._scratch.nbytes())

    def sync(self) -> None:
        synchronize(self.device)

    def graphs_captured(self) -> bool:
        """Whether the step replays captured CUDA graphs (its forward and its depformer)."""
        main, depth = self._main, self._depth
        return (main is not None and graph_captured(main) and depth is not None
                and graph_captured(depth))

    @contextmanager
    def recording_text_logits(self) -> Iterator[list[torch.Tensor]]:
        """The text logits of every step while open (copied: a graph reuses its buffers)."""
        main = self._main
        assert main is not None, "the runtime is not streaming"
        seen: list[torch.Tensor] = []

        def recording(codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            out, text_logits = main(codes)
            seen.append(text_logits.float().clone())
            return out, text_logits

        self._main = recording  # type: ignore[assignment]  # called like the graph
        try:
            yield seen
        finally:
            self._main = main

    def seed(self, seed: int) -> None:
        torch.manual_seed(seed)
