"""Evaluation harnesses: spoken QA with and without injection (`qa_*`), our own span-only QA
set (`make_set.py`), Full-Duplex-Bench v1/v1.5 (`fdb/`: turn-taking) and v3 (`fdb3/`: tool
use). Each is an `eval` command (cli.py)."""
