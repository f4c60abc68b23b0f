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


def test_the_microphone_list_offers_the_system_default_once(qtbot) -> None:
    """Issue 28, item 14: PortAudio lists ALSA's "default" device, which is the system
    default the list already offers as "System default": it is offered once. A setting
    saved as "default" (chosen from the old list) reads as the system default, not as a
    device that is "not connected"."""
    from app.settings.schema import AudioSettings
    from app.ui.settings.audio_tab import SYSTEM_DEFAULT, AudioTab

    listed_inputs, _ = list_devices()
    assert "pulse" in listed_inputs
    for saved in (None, "default"):
        tab = AudioTab(AudioSettings(input_device=saved, output_device=saved),
                       list_devices=list_devices)
        qtbot.addWidget(tab)
        for combo in (tab.input_combo, tab.output_combo):
            names = [combo.itemText(i) for i in range(combo.count())]
            assert names.count(SYSTEM_DEFAULT) == 1 and "pulse" in names, names
            assert not [n for n in names if n.lower().startswith("default")], names
            assert combo.currentText() == SYSTEM_DEFAULT
        assert tab.settings().input_device is None
