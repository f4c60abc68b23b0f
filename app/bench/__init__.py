"""Benchmarks that print numbers: `python main.py bench KIND`, one file per kind, each asked
by its frozen request in requests.py (which also lists the kinds in `bench --help`'s order)."""
