"""`python main.py eval`: usage errors are one line and a non-zero exit, before anything
slow is loaded; `eval fdb` is wired under it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def main_py(*args: str, data_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "main.py", *args], cwd=REPO_ROOT,
                          env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
                          capture_output=True, text=True, timeout=300)


def test_usage_errors(tmp_path):
    data = tmp_path / "data"
    bare = main_py("eval", data_dir=data)
    assert bare.returncode == 2 and "choose qa, make-set, fdb or fdb3" in bare.stderr
    no_data = main_py("eval", "qa", "--out", str(tmp_path / "o"), data_dir=data)
    assert no_data.returncode == 1
    assert no_data.stderr.startswith("error: --data is needed to run")
    empty = tmp_path / "empty"
    empty.mkdir()
    not_a_set = main_py("eval", "qa", "--data", str(empty), "--out", str(tmp_path / "o"),
                        "--run-only", data_dir=data)
    assert not_a_set.returncode == 1 and "neither meta.json nor" in not_a_set.stderr
    (tmp_path / "set" / "audios").mkdir(parents=True)
    (tmp_path / "set" / "audios" / "a.wav").write_bytes(b"")
    (tmp_path / "set" / "meta.json").write_text(json.dumps([{"id": "a", "text": "q",
                                                             "answer": "x"}]))
    no_llm = main_py("eval", "qa", "--data", str(tmp_path / "set"), "--out",
                     str(tmp_path / "o"), data_dir=data)
    assert no_llm.returncode == 1 and "the inject arm asks an LLM" in no_llm.stderr
    no_gold = main_py("eval", "qa", "--data", str(tmp_path / "set"), "--out",
                      str(tmp_path / "o"), "--gold", data_dir=data)
    assert no_gold.returncode == 1 and "has no gold passages" in no_gold.stderr
    typo = main_py("eval", "qa", "--out", str(tmp_path / "o"), "--judge-prompt", "trivia",
                   data_dir=data)
    assert typo.returncode == 1 and "no judge prompt 'trivia'" in typo.stderr
    assert len(typo.stderr.strip().splitlines()) == 1  # one line, the traceback in the log


def test_fdb_is_wired_under_eval(tmp_path):
    shown = main_py("eval", "fdb", "--help", data_dir=tmp_path)
    assert shown.returncode == 0 and shown.stdout.startswith("usage: python main.py eval fdb")
