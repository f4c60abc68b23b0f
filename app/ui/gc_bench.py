"""One full garbage collection in the desktop app after start-up, before and after gc.freeze().

    python -m app.bench.gc_bench [--repeats N]

Builds the app's real window as `python main.py` does (settings store, conversation
controller, window, the app around it; offscreen, in a throw-away data and config dir, no
conversation running, the first run's model dialog not opened), then times gc.collect() N
times with everything the start-up made still watched by the collector, calls
gc.freeze() as the app does after start-up (app/ui/gui_thread_gc.py), and times it N times
again. It prints one JSON object: the median and the largest time of each (ms), and how
many objects the collector watched each time (gc.get_objects()), and the load average
(the timings stretch on a busy machine).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time


def _timed_collections(repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - started) * 1000)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.bench.gc_bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10, help="collections timed each way")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from app.settings.store import SettingsStore
    from app.ui.app import DesktopApp, _live_audio_factory
    from app.ui.conversation_controller import ConversationController
    from app.ui.main_window import MainWindow
    from app.ui.throwaway_dirs import throwaway_app_dirs

    app = QApplication.instance() or QApplication(sys.argv[:1])
    with throwaway_app_dirs(prefix="contextspan-gc-bench-"):
        settings, _notice = SettingsStore().load()
        controller = ConversationController(_live_audio_factory)
        window = MainWindow(controller, settings)
        desktop = DesktopApp(window, controller, SettingsStore())
        window.show()
        for _ in range(5):
            app.processEvents()
        gc.disable()  # as the app runs: only the collections timed here run
        gc.collect()
        watched_before = len(gc.get_objects())
        before = _timed_collections(args.repeats)
        gc.freeze()
        watched_after = len(gc.get_objects())
        after = _timed_collections(args.repeats)
        gc.unfreeze()
        gc.enable()
        window.features.keeper.shutdown()
        del desktop
    print(json.dumps({
        "what": "one full gc.collect() in the desktop app after start-up (window built, "
                "no conversation, offscreen)",
        "repeats": args.repeats,
        "before_freeze_ms": {"median": round(statistics.median(before), 3),
                             "max": round(max(before), 3)},
        "after_freeze_ms": {"median": round(statistics.median(after), 3),
                            "max": round(max(after), 3)},
        "objects_watched_before": watched_before,
        "objects_watched_after": watched_after,
        "torch_imported": "torch" in sys.modules,
        "load_average_1min": round(os.getloadavg()[0], 2),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
