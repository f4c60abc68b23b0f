import pytest

from app.audio.devices import default_device, list_devices, resolve_device

pytestmark = pytest.mark.usefixtures("null_sink")


def test_lists_the_pulse_device_both_ways() -> None:
    inputs, outputs = list_devices()
    assert "pulse" in inputs and "pulse" in outputs


def test_a_saved_name_resolves_to_that_device() -> None:
    resolved = resolve_device("pulse", "output")
    assert resolved.name == "pulse" and resolved.warning is None and resolved.index is not None


def test_a_missing_device_falls_back_to_the_default_with_a_warning() -> None:
    resolved = resolve_device("USB Headset that was unplugged", "input")
    assert resolved.name == default_device("input").name
    assert resolved.warning is not None and "USB Headset that was unplugged" in resolved.warning


def test_no_saved_name_means_the_default_silently() -> None:
    assert resolve_device(None, "output") == default_device("output")
    assert resolve_device(None, "output").warning is None
