"""Full-Duplex-Bench v3, tool use under disfluent speech: every sample through the whole
pipeline (`run.py`) against our MCP server of the benchmark's mock APIs (`mock_server.py`),
scored as its evaluators score (`score.py`, `judge.py`), and a small spoken demo set in its
layout (`make_demo.py`). `cli.py` is the `eval fdb3` command."""
