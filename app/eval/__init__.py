"""Evaluation harnesses: spoken QA with and without injection (`qa_*`), our own span-only QA
set (`make_set.py`), and Full-Duplex-Bench (`fdb/`). Each is an `eval` command (cli.py)."""
