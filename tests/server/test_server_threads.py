"""`serve`'s torch threads (app/server/threads.py): the rule `--threads auto` follows, the
number `--threads` sets, and the refusals. The running server's own count is checked in
test_server_cli.py (its start line and /health)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.server.cli import main
from app.server.threads import choose_threads, parse_threads, usable_cores


def test_on_a_cpu_auto_takes_half_the_usable_cores_at_least_one_at_most_eight():
    assert [choose_threads(None, "cpu", {}, cores=c).threads
            for c in (1, 2, 3, 4, 16, 64)] == [1, 1, 1, 2, 8, 8]
    assert choose_threads(None, "cpu", {}, cores=2).describe() == (
        "1 torch thread (auto: half of 2 usable cores, at most 8)")


def test_on_a_gpu_auto_takes_one_thread_and_omp_num_threads_or_the_option_win():
    assert choose_threads(None, "cuda", {}, cores=32).threads == 1
    assert choose_threads(None, "cuda", {"OMP_NUM_THREADS": "6"}, cores=32).describe() == (
        "6 torch threads (OMP_NUM_THREADS)")
    assert choose_threads(3, "cpu", {"OMP_NUM_THREADS": "6"}, cores=32).describe() == (
        "3 torch threads (--threads)")
    assert choose_threads(None, "cpu", {"OMP_NUM_THREADS": "0"}, cores=8).threads == 4


def test_a_containers_cpu_quota_lowers_the_usable_cores(tmp_path: Path):
    quota = tmp_path / "cpu.max"
    quota.write_text("150000 100000\n")  # docker run --cpus 1.5
    assert usable_cores(quota) == 1
    quota.write_text("max 100000\n")
    assert usable_cores(quota) >= 1 and usable_cores(quota) == usable_cores(tmp_path / "none")


def test_threads_option_is_a_number_or_auto(capsys):
    assert parse_threads("auto") is None and parse_threads("4") == 4
    for wrong in ("0", "four"):
        with pytest.raises(ValueError):
            parse_threads(wrong)
    assert main(["--threads", "0"]) == 1
    assert "--threads must be at least 1" in capsys.readouterr().err
