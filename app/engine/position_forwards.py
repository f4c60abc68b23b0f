"""Multi-position forwards of the temporal transformer, CUDA-graphed by size.

On a GPU an eager forward of the 7B costs about as much in kernel launches as in work: a
16-position forward took 47 ms on an H200 where the CUDA-graphed one-position step took
22 ms (`bench gpu`, 2026-11-30). So a span's positions go through the transformer in pieces
whose sizes are powers of two (a 37-position block: 32, 4, 1), each size with its own CUDA
graph (moshi's `CUDAGraphed`: run eagerly once, captured on the second use, replayed after).
The pieces are exact, like any chunked prefill (tested), and the graphs update the same
state tensors in place as the step's graph, so they stay valid for each other. Where no
graph can help (a CPU, or NO_CUDA_GRAPH=1) it is ONE eager forward, as before.
"""

from __future__ import annotations

import torch
from moshi.models import LMModel
from moshi.utils.compile import CUDAGraphed

from app.moshi_internals import cuda_graphs_enabled


def piece_sizes(n: int) -> list[int]:
    """The power-of-two pieces of n positions, largest first (37: [32, 4, 1])."""
    return [1 << bit for bit in reversed(range(max(n, 0).bit_length())) if n >> bit & 1]


class PositionForwards:
    def __init__(self, lm: LMModel, pieces: bool | None = None) -> None:
        """`pieces`: None, pieces with graphs where CUDA graphs work, else one forward;
        True, pieces always (graphed only on CUDA: for tests of the pieces on a CPU)."""
        self._lm = lm
        self._disable = lm.device.type != "cuda"
        self._pieces = pieces
        self._graphs: dict[int, CUDAGraphed] = {}

    def sizes(self) -> list[int]:
        """The sizes seen so far (each captured once it was used twice)."""
        return sorted(self._graphs)

    def __call__(self, codes: torch.Tensor, sum_condition: torch.Tensor | None = None,
                 cross_condition: torch.Tensor | None = None) -> torch.Tensor:
        """Forward codes [B, 17, n]; returns the transformer output [B, n, dim]."""
        graphs = not self._disable and cuda_graphs_enabled()
        if not (graphs if self._pieces is None else self._pieces):
            out, _text_logits = self._lm.forward_text(codes, sum_condition, cross_condition)
            return out
        outputs, start, n = [], 0, codes.shape[-1]
        for size in piece_sizes(n):
            graph = self._graphs.get(size)
            if graph is None:
                graph = self._graphs[size] = CUDAGraphed(self._lm.forward_text,
                                                         disable=self._disable)
            out, _text_logits = graph(codes[:, :, start : start + size], sum_condition,
                                      cross_condition)
            outputs.append(out.clone())  # a graph's output is overwritten by its next replay
            start += size
        return torch.cat(outputs, dim=1)
