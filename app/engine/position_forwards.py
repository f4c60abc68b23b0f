"""Multi-position forwards of the temporal transformer, CUDA-graphed by padded size.

On a GPU an eager forward of the 7B costs about as much in kernel launches as in work: a
16-position forward took 47 ms on an H200 where the CUDA-graphed one-position step took
22 ms (`bench gpu`, 2026-11-30). So a forward of many positions replays a CUDA graph
captured for its size. Graphs were first made for power-of-two pieces (600 positions:
512 + 64 + 16 + 8), and every piece reads all the weights again: on the H200 a 256-block
took 18.8 ms and a 400-block (three pieces) 50.3 ms. Now a forward of n positions is ONE
forward padded to the next of a few fixed sizes (`FORWARD_SIZES`: 600 goes as 640), so the
weights are read once; only past the largest size is it cut, into pieces of that size.

The padding columns go through the transformer after the real ones, so causal attention
keeps them out of every real output, and are then taken back: the streaming positions
(the attention layers' offsets, the KV rings' end offsets, the transformer's offsets) are
rewound by the padding, in place (the step's CUDA graph holds those tensors). The keys the
padding wrote stay in ring slots that no query can see: below the ring's write point,
which the next positions overwrite, or, once the ring has wrapped, in slots whose old
positions are older than the context window, provided the ring is widened for the padded
size (`widest_forward`; kv_ring.py). Exact, like any chunked prefill (tested on the CPU).
Where no graph can help (a CPU, or NO_CUDA_GRAPH=1) it is ONE eager forward, unpadded.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import torch
from moshi.models import LMModel
from moshi.utils.compile import CUDAGraphed

from app.moshi_internals import cuda_graphs_enabled, rewind_positions

# The sizes a graphed forward is padded to: steps of at most 1/4 above 128, so a block
# pays at most a quarter more positions than it has, and 14 graphs in all.
FORWARD_SIZES = (16, 32, 64, 128, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024)


def positions_codes(lm: LMModel, token_ids: Sequence[int], batch: int = 1) -> torch.Tensor:
    """A span's K positions as codes [batch, 17, K]: text ids in stream 0, the zero token
    (an exact zero embedding) in the 16 audio streams."""
    ids = torch.tensor(list(token_ids), dtype=torch.long, device=lm.device)
    codes = torch.full((batch, lm.num_codebooks, ids.numel()), lm.zero_token_id,
                       dtype=torch.long, device=lm.device)
    codes[:, 0, :] = ids
    return codes


def padded_pieces(n: int) -> list[tuple[int, int]]:
    """(real positions, padded size) of each forward for n positions: 600 -> [(600, 640)],
    2100 -> [(1024, 1024), (1024, 1024), (52, 64)]."""
    largest = FORWARD_SIZES[-1]
    pieces = [(largest, largest)] * (max(n, 0) // largest)
    rest = max(n, 0) % largest
    if rest:
        pieces.append((rest, FORWARD_SIZES[bisect.bisect_left(FORWARD_SIZES, rest)]))
    return pieces


def graphed_forwards(lm: LMModel) -> bool:
    """Whether this LM's multi-position forwards go through padded graphs by default."""
    return lm.device.type == "cuda" and cuda_graphs_enabled()


def widest_forward(lm: LMModel, max_positions: int, padded: bool | None = None) -> int:
    """The most positions one forward writes into the KV rings when reads are at most
    `max_positions` long: what the rings must be widened for (kv_ring.py)."""
    if not (graphed_forwards(lm) if padded is None else padded):
        return max_positions
    return widest_forward_size(max_positions)


def warmup_sizes(max_positions: int) -> list[int]:
    """Reads that meet every padded size a read of up to `max_positions` positions uses
    (the last one capped at `max_positions`, which pads to the widest): warmed up, graphs
    captured, before the first frame (a first forward of a new shape is slow)."""
    top = widest_forward_size(max_positions)
    return sorted({min(size, max(1, max_positions)) for size in FORWARD_SIZES if size <= top})


def widest_forward_size(max_positions: int) -> int:
    """The largest padded size among the forwards of a `max_positions` read."""
    return max((size for _real, size in padded_pieces(max(1, max_positions))), default=1)


class PositionForwards:
    def __init__(self, lm: LMModel, padded: bool | None = None) -> None:
        """`padded`: None, padded graphed forwards where CUDA graphs work, else one eager
        forward; True, padded forwards always (graphed only on CUDA: for tests of the
        padding on a CPU)."""
        self._lm = lm
        self._disable = lm.device.type != "cuda"
        self._padded = padded
        self._graphs: dict[int, CUDAGraphed] = {}
        self.forward_count = 0  # forwards run, for tests and benchmarks

    def uses_padding(self) -> bool:
        return graphed_forwards(self._lm) if self._padded is None else self._padded

    def sizes(self) -> list[int]:
        """The padded sizes seen so far (each captured once it was used twice)."""
        return sorted(self._graphs)

    def __call__(self, codes: torch.Tensor, sum_condition: torch.Tensor | None = None,
                 cross_condition: torch.Tensor | None = None) -> torch.Tensor:
        """Forward codes [B, 17, n]; returns the transformer output [B, n, dim]."""
        if not self.uses_padding():
            self.forward_count += 1
            out, _text_logits = self._lm.forward_text(codes, sum_condition, cross_condition)
            return out
        outputs, start = [], 0
        for real, size in padded_pieces(codes.shape[-1]):
            piece = codes[:, :, start : start + real]
            if size > real:  # any valid codes: their outputs are dropped, their positions rewound
                piece = torch.cat([piece, piece[:, :, -1:].expand(-1, -1, size - real)], dim=2)
            graph = self._graphs.get(size)
            if graph is None:
                graph = self._graphs[size] = CUDAGraphed(self._lm.forward_text,
                                                         disable=self._disable)
            self.forward_count += 1
            out, _text_logits = graph(piece, sum_condition, cross_condition)
            if size > real:
                rewind_positions(self._lm.transformer, size - real)
            outputs.append(out[:, :real].clone())  # a replay overwrites a graph's output
            start += real
        return torch.cat(outputs, dim=1)
