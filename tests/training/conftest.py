"""Import `app` before any test module here imports moshi: app turns moshi's lazy
torch.compile off (NO_TORCH_COMPILE) and moshi reads that once, when it is imported."""

import app  # noqa: F401
