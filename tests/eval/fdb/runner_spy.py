"""run_headless with a record of the inputs it was given (resume is judged by these)."""

from __future__ import annotations

from pathlib import Path


def counting_runner(calls: list[str]):
    from app.conversation.headless import run_headless

    def runner(config, run):
        calls.append(Path(run.input_path).name)
        return run_headless(config, run)

    return runner
