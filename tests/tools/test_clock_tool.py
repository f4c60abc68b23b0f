"""The clock, with an injected "now" so answers are exact."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from app.tools.clock import ClockTool, speakable

NOW = datetime(2026, 11, 29, 19, 30, 5, 123456, tzinfo=timezone.utc)


def clock() -> ClockTool:
    return ClockTool(now=lambda: NOW, local_zone=ZoneInfo("Europe/Paris"))


def test_local_time_and_utc_are_spoken_and_iso() -> None:
    result = clock().run({})
    assert result.ok
    assert result.content.splitlines() == [
        "Local time: Sunday 29 November 2026, 20:30 (CET, UTC+01:00)",
        "  ISO: 2026-11-29T20:30:05+01:00",
        "UTC: 2026-11-29T19:30:05+00:00",
    ]


def test_another_time_zone_on_request() -> None:
    result = clock().run({"timezone": "Asia/Kolkata"})
    assert result.ok
    assert "Time in Asia/Kolkata: Monday 30 November 2026, 01:00 (IST, UTC+05:30)" \
        in result.content
    assert "ISO: 2026-11-30T01:00:05+05:30" in result.content


def test_summer_time_is_applied() -> None:
    summer = ClockTool(now=lambda: datetime(2026, 7, 1, 12, 0, tzinfo=timezone.utc),
                       local_zone=ZoneInfo("Europe/Paris"))
    assert "Wednesday 1 July 2026, 14:00 (CEST, UTC+02:00)" in summer.run({}).content


def test_naive_now_is_taken_as_utc_and_os_zone_is_the_default() -> None:
    result = ClockTool(now=lambda: datetime(2026, 1, 1, 0, 0)).run({})
    assert result.ok and "UTC: 2026-01-01T00:00:00+00:00" in result.content


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "../../etc/passwd", "/etc/localtime",
                                  "Europe/../Asia/Tokyo", "", "x" * 200])
def test_unknown_or_malicious_zones_are_errors(zone: str) -> None:
    result = clock().run({"timezone": zone})
    if zone == "":  # an empty zone means "no extra zone"
        assert result.ok
    else:
        assert not result.ok and "unknown time zone" in result.error


def test_wrong_type_is_an_error() -> None:
    assert not clock().run({"timezone": 5}).ok


def test_speakable_form() -> None:
    assert speakable(datetime(2026, 11, 29, 20, 30)) == "Sunday 29 November 2026, 20:30"
