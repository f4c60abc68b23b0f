"""Libraries' chatter that a CPU run does not need to see on its terminal, sent to the log.

- alsa-lib prints its errors (an underrun under a loaded machine: "ALSA lib pcm.c:…
  (snd_pcm_recover) underrun occurred", an unknown PCM while PortAudio probes the devices)
  straight to stderr from C. `snd_lib_error_set_handler` is alsa-lib's own hook for that: the
  handler installed here turns each message into a record of the `app.audio.alsa` logger
  (INFO: the log file, not the terminal). PortAudio loads the same libasound.so.2, so one
  handler covers it.
- torch logs "No CUDA runtime is found, using CUDA_HOME=…" through its own terminal handler
  when `torch.utils.cpp_extension` is imported on a machine without CUDA (moshi imports it).
  Only that message is dropped from torch's logger and written to our log instead; every
  other torch message is left alone.

Both are installed by `quiet_library_noise()`, early (the CLI calls it before anything imports
torch or PortAudio); calling it again does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading

ALSA_LOGGER = "app.audio.alsa"
TORCH_CPP_LOGGER = "torch.utils.cpp_extension"
TORCH_NO_CUDA = "No CUDA runtime is found"

log = logging.getLogger(__name__)
_lock = threading.Lock()
_installed: dict[str, object] = {}  # what was installed (the ctypes callback must stay alive)

# void (*snd_lib_error_handler_t)(const char *file, int line, const char *function, int err,
#                                 const char *fmt, ...): the varargs are not read (ctypes
# cannot), so the record carries the format, which for alsa-lib's messages says what happened.
_ALSA_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                 ctypes.c_int, ctypes.c_char_p)


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", errors="replace") if raw else ""


def _alsa_message(file: bytes | None, line: int, function: bytes | None, err: int,
                  fmt: bytes | None) -> None:
    try:
        message = _text(fmt).replace("%s", "…").replace("%d", "…")
        logging.getLogger(ALSA_LOGGER).info("ALSA %s:%d (%s) %s%s", _text(file), line,
                                            _text(function), message,
                                            f" (error {err})" if err else "")
    except Exception:  # a C callback must never raise
        pass


def _route_alsa() -> bool:
    """alsa-lib's error messages to the log; False where there is no alsa-lib."""
    name = ctypes.util.find_library("asound") or "libasound.so.2"
    try:
        library = ctypes.CDLL(name)
        setter = library.snd_lib_error_set_handler
    except (OSError, AttributeError):
        return False
    handler = _ALSA_HANDLER(_alsa_message)
    setter.argtypes = [_ALSA_HANDLER]
    setter.restype = ctypes.c_int
    if setter(handler) != 0:
        return False
    _installed["alsa"] = (library, handler)
    return True


class _DropNoCudaNotice(logging.Filter):
    """torch's "No CUDA runtime is found" on a CPU machine: to our log at INFO, not printed."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(TORCH_NO_CUDA):
            return True
        log.info("torch: %s", record.getMessage())
        return False


def _quiet_torch_no_cuda() -> None:
    logging.getLogger(TORCH_CPP_LOGGER).addFilter(_DropNoCudaNotice())
    _installed["torch"] = True


def quiet_library_noise() -> None:
    """Route alsa-lib's messages and torch's no-CUDA notice to the log (once)."""
    with _lock:
        if "done" in _installed:
            return
        _installed["done"] = True
        _quiet_torch_no_cuda()
        if not _route_alsa():
            log.debug("no alsa-lib here: its messages need no handler")
