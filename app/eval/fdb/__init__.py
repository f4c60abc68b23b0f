"""Full-Duplex-Bench v1/v1.5: render the engine's replies in the benchmark's layout
(`render.py`) and score the v1 turn-taking tasks with our own listeners (`score.py`).
`cli.py` is the `eval fdb` command."""
