"""`python -m app.ui.window_soak --minutes 5`: the real window on the tiny model for a while,
with a typed question every 20 s (answered by the stand-in Ollama server) and the status bar
updating five times a second; prints the window's width and minimum width over time as JSON,
and exits 1 if the window grew by itself.

Offscreen by default; the window's remembered state and its autosaved conversation go to a
temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from app.llm_backends import OLLAMA

START_WIDTH = 980
QUESTION_EVERY_S = 20.0
SAMPLE_EVERY_S = 10.0


def run(minutes: float) -> dict:
    from PySide6.QtWidgets import QApplication

    from app.audio.file_source import FileAudioSource
    from app.frames import SAMPLE_RATE
    from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
    from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
    from app.ui.conversation_controller import ConversationController
    from app.ui.main_window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    from app.ui.gui_thread_gc import GuiThreadCollector

    GuiThreadCollector(app).start()  # as the app runs
    answer = ("A long answer, so that spans, the context figures and the transcript all "
              "grow while the window is watched: " + "words " * 40).strip()
    noise = (0.01 * np.random.default_rng(0).standard_normal(SAMPLE_RATE * 4)).astype(np.float32)
    samples: list[dict] = []
    with OllamaStandIn(script=lambda _body: ScriptedReply(content=answer),
                       models=("standin:latest",)) as standin:
        settings = AppSettings(
            speech=SpeechModelSettings(model_id="tiny", device="cpu"),
            llm=LlmSettings(backend=OLLAMA, host=standin.url, model="standin:latest",
                            tools_enabled=False, stt_model="none"))
        controller = ConversationController(lambda _s: FileAudioSource(noise))
        window = MainWindow(controller, settings)
        window.resize(START_WIDTH, 700)
        window.show()
        controller.start(settings)
        deadline = time.monotonic() + 300
        while controller.state != "running" and time.monotonic() < deadline:
            app.processEvents()
            time.sleep(0.02)
        if controller.state != "running":
            raise RuntimeError(f"the conversation did not start ({controller.state})")
        started = time.monotonic()
        next_question = next_sample = started
        asked = 0
        while time.monotonic() - started < minutes * 60:
            now = time.monotonic()
            if now >= next_question:
                asked += 1
                controller.send_text(f"Question {asked}: what is new?")
                next_question += QUESTION_EVERY_S
            if now >= next_sample:
                samples.append({"s": round(now - started, 1), "width": window.width(),
                                "min_width": window.minimumSizeHint().width(),
                                "entries": len(window.transcript.entries()),
                                "status": window.status_line.frame.text()})
                next_sample += SAMPLE_EVERY_S
            app.processEvents()
            time.sleep(0.02)
        samples.append({"s": round(time.monotonic() - started, 1), "width": window.width(),
                        "min_width": window.minimumSizeHint().width(),
                        "entries": len(window.transcript.entries()),
                        "status": window.status_line.frame.text()})
        controller.shutdown()
        window.features.keeper.shutdown()
    widths = [s["width"] for s in samples]
    return {"minutes": minutes, "start_width": START_WIDTH, "max_width": max(widths),
            "final_width": widths[-1], "max_min_width": max(s["min_width"] for s in samples),
            "questions": asked, "grew": max(widths) > START_WIDTH, "samples": samples}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.ui.window_soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=5.0)
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    with tempfile.TemporaryDirectory(prefix="contextspan-soak-") as scratch:
        os.environ["CONTEXTSPAN_CONFIG_DIR"] = str(Path(scratch) / "config")
        import app.conversation.transcript.saved as store

        store.conversations_dir = lambda: Path(scratch) / "conversations"
        result = run(args.minutes)
    print(json.dumps(result, indent=1))
    return 1 if result["grew"] else 0


if __name__ == "__main__":
    sys.exit(main())
