"""The desktop app as the thin client runs it, for tests/remote/test_thin_client.py: run in a
process where the engine's packages do not import (engine_blocker.py).

    python -m tests.remote.thin_client_app SERVER_URL TOKEN OLLAMA_URL QUESTION_WAV OUT.json \
        [HOLD_S]

The real window, controller and session, offscreen: Settings is opened on every tab, then a
conversation with the speech model and its recognition on the server, the question played
from a file at a microphone's pace, the LLM on the Ollama stand-in. It ends once the answer
to the words the server heard has landed (or after a deadline), goes on for HOLD_S more
seconds (0 by default: the memory of a longer conversation), stops, and writes what the
window showed, the peak memory and the modules loaded to OUT.json.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

DEADLINE_S = 240.0


def main(url: str, token: str, ollama: str, question: Path, out: Path,
         hold_s: float = 0.0) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    import sphn

    from app.audio.file_source import FileAudioSource
    from app.settings.schema import AppSettings, EngineSettings, LlmSettings
    from app.ui.conversation_controller import ConversationController
    from app.ui.main_window import MainWindow
    from app.ui.settings.dialog import SettingsDialog

    def spin(seconds: float, until=lambda: False) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            if until():
                return True
            time.sleep(0.02)
        return until()

    settings = AppSettings(
        engine=EngineSettings(mode="server", server_url=url, server_token=token,
                              connect_timeout_s=60.0, asr_on_server=True),
        llm=LlmSettings(backend="ollama", host=ollama, model="standin:latest",
                        tools_enabled=False))
    result: dict = {}

    dialog = SettingsDialog(settings)
    dialog.show()
    for tab in range(dialog.tabs.count()):
        dialog.tabs.setCurrentIndex(tab)
        spin(0.5)
    dialog.tabs.setCurrentIndex(0)
    spin(2.0, lambda: "thin client" in dialog.speech_tab.memory_plan.text())
    result["plan_on_server"] = dialog.speech_tab.memory_plan.text()
    dialog.engine_box.local_radio.setChecked(True)
    spin(2.0, lambda: "full install" in dialog.speech_tab.memory_plan.text())
    result["plan_here"] = dialog.speech_tab.memory_plan.text()
    result["install_note"] = (dialog.engine_box.install_note.text()
                              if not dialog.engine_box.install_note.isHidden() else "")
    result["asr_checkbox_saved"] = dialog.settings().engine.asr_on_server
    dialog.reject()

    # Start with "This computer" chosen: the window says what it needs.
    here = ConversationController(lambda _settings: None)
    local = MainWindow(here, replace(settings, engine=replace(settings.engine, mode="local")))
    local.show()
    local.start_action.trigger()
    spin(60.0, lambda: here.state == "error")
    result["local_start"] = (here.state, local.banner.text())
    assert here.shutdown(30.0)
    local.features.keeper.shutdown()
    local.close()

    pcm, _ = sphn.read(str(question), sample_rate=24000)
    microphone = FileAudioSource(pcm[0])
    controller = ConversationController(lambda _settings: microphone)
    window = MainWindow(controller, settings)
    window.show()
    states: list[str] = []
    controller.state_changed.connect(lambda state, _detail: states.append(state))
    window.start_action.trigger()

    def answered() -> bool:
        return any(e.kind == "span" and e.landed_frame is not None
                   for e in window.transcript.entries())

    spin(DEADLINE_S, answered)
    spin(hold_s)
    spin(3.0, lambda: "late" in window.status_line.frame.text()
         and "network –" not in window.status_line.frame.text())
    result["status_network"] = window.status_line.frame.text()
    result["entries"] = [{"kind": e.kind, "text": e.text, "final": e.final, "source": e.source,
                          "landed_frame": e.landed_frame, "detail": e.detail}
                         for e in window.transcript.entries()]
    status = window.status_line.last_status
    result["audio_codec"] = status.audio_codec if status else ""
    window.start_action.trigger()  # Stop
    spin(30.0, lambda: controller.state == "stopped")
    result["states"] = states
    result["shutdown"] = controller.shutdown(30.0)
    window.features.keeper.shutdown()
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["modules"] = sorted({name.partition(".")[0] for name in sys.modules})
    out.write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), Path(sys.argv[5]),
                  float(sys.argv[6]) if len(sys.argv) > 6 else 0.0))
