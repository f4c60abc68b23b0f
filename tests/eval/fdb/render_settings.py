"""What the shared render fixture (conftest.py) renders with, for the tests to check."""

TAIL_S = 0.5  # the renders' tail of silence (exercises --tail-seconds)
SPAN_ANSWER = "The first time is on Tuesday."  # the stand-in LLM's answer to every turn
