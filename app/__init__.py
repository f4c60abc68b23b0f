"""ContextSpan: a full-duplex voice assistant with Context Spanning injection."""

import os

__version__ = "0.1.0"

# moshi wraps a few hot functions in torch.compile, decided when moshi is imported. The
# compile costs seconds at start-up (7 s per engine on a 2-core CPU) and gains little over
# the CUDA graphs moshi already uses, so it is off unless CONTEXTSPAN_TORCH_COMPILE=1.
if os.environ.get("CONTEXTSPAN_TORCH_COMPILE") != "1":
    os.environ.setdefault("NO_TORCH_COMPILE", "1")
