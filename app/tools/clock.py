"""The current date and time, which an LLM cannot know by itself.

The answer carries ISO timestamps (exact, for reasoning) and a speakable form ("Sunday
29 November 2026, 20:30") that the speech model can say as-is. Day and month names are
English and fixed, not the process locale's, so the answer does not change with the OS.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from app.tools.base import Tool, ToolResult

_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
# IANA keys are plain names like "Europe/Paris" or "Etc/GMT+5": no dots, no leading slash,
# so a key can never name a file outside the time zone database.
_ZONE_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*$")


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def speakable(moment: datetime) -> str:
    return (f"{_DAYS[moment.weekday()]} {moment.day} {_MONTHS[moment.month - 1]} "
            f"{moment.year}, {moment:%H:%M}")


def _offset(moment: datetime) -> str:
    text = moment.strftime("%z")  # "+0100"
    return f"UTC{text[:3]}:{text[3:]}" if text else "UTC"


def _describe(label: str, moment: datetime) -> str:
    zone, offset = moment.tzname() or "", _offset(moment)
    # Abbreviations help a listener ("CET"); numeric names ("+05") and "UTC" add nothing.
    named = zone and zone != "UTC" and not zone.startswith(("+", "-"))
    zone_part = f"{zone}, {offset}" if named else offset
    iso = moment.isoformat(timespec="seconds")
    return f"{label}: {speakable(moment)} ({zone_part})\n  ISO: {iso}"


class ClockTool(Tool):
    """Date and time in the user's zone, in UTC and optionally in any IANA zone."""

    name = "clock"
    description = (
        "Get the current date and time: the user's local time, UTC, and optionally the time "
        "in another place given as an IANA time zone such as 'Asia/Tokyo' or 'America/New_York'."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "timezone": {
                "type": "string",
                "description": "Optional IANA time zone name, e.g. 'Europe/Paris'",
            },
        },
        "required": [],
    }

    def __init__(self, now: Callable[[], datetime] = _utc_now,
                 local_zone: tzinfo | None = None) -> None:
        """`now` returns an aware datetime (injectable for tests); `local_zone` None means
        the operating system's zone."""
        self._now = now
        self._local_zone = local_zone

    def run(self, arguments: Mapping[str, Any], cancel: threading.Event | None = None
            ) -> ToolResult:
        key = arguments.get("timezone")
        if key is not None and not isinstance(key, str):
            return self._error("'timezone' must be a string such as 'Europe/Paris'")
        zone: tzinfo | None = None
        if key is not None and key.strip():
            key = key.strip()
            if len(key) > 64 or not _ZONE_KEY.match(key):
                return self._error(f"unknown time zone {key[:64]!r}")
            try:
                zone = ZoneInfo(key)
            except (ZoneInfoNotFoundError, ValueError, OSError):
                return self._error(f"unknown time zone {key!r}; use an IANA name such as "
                                   "'Europe/Paris'")

        now = self._now()
        if now.tzinfo is None:  # a naive clock is taken to be UTC
            now = now.replace(tzinfo=timezone.utc)
        local = now.astimezone(self._local_zone) if self._local_zone else now.astimezone()
        lines = [_describe("Local time", local)]
        if zone is not None:
            lines.append(_describe(f"Time in {key}", now.astimezone(zone)))
        lines.append(f"UTC: {now.astimezone(timezone.utc).isoformat(timespec='seconds')}")
        return ToolResult(self.name, "\n".join(lines), source="clock")

    def _error(self, message: str) -> ToolResult:
        return ToolResult(self.name, "", source="clock", error=message)
