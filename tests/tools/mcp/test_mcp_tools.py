"""MCP tools as the LLM gets them (hub.py, tool.py, names.py, consent.py) on real servers:
offered beside the built-in tools under unique names, switched off one by one, shared by
leases, and guarded by the user's permission when they change things."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from app.tools.base import ToolRegistry
from app.tools.calculator import CalculatorTool
from app.tools.mcp.consent import ConsentBroker
from app.tools.mcp.hub import McpHub
from app.tools.mcp.names import assign_names
from tests.tools.mcp.mcp_servers import assert_gone, process_alive, read_pid, stdio_server
from tests.waiting import wait_until

START_S = 60.0


@pytest.fixture(scope="module")
def events_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("calendar") / "events.txt"


@pytest.fixture(scope="module")
def servers(events_file: Path):
    return (stdio_server("notes", "--events-file", str(events_file)),
            stdio_server("diary", "--events-file", str(events_file)))


@pytest.fixture()
def broker() -> ConsentBroker:
    return ConsentBroker(timeout_s=5.0)


@pytest.fixture()
def hub(broker: ConsentBroker):
    hub = McpHub(consent=broker)
    yield hub
    hub.close_all()


def registry_with(hub: McpHub, servers) -> ToolRegistry:
    lease = hub.lease(servers)
    statuses = lease.wait_settled(START_S)
    assert all(s.state == "ready" for s in statuses), statuses
    return ToolRegistry([CalculatorTool()], sources=[lease])


def test_names_stay_as_the_server_chose_unless_two_would_clash():
    names = assign_names([("notes", "lookup"), ("diary", "lookup"), ("notes", "calculator"),
                          ("notes", "add.event/v2"), ("diary", "solo")],
                         reserved={"calculator"})
    assert names == {("notes", "lookup"): "notes__lookup", ("diary", "lookup"): "diary__lookup",
                     ("notes", "calculator"): "notes__calculator",
                     ("notes", "add.event/v2"): "add_event_v2", ("diary", "solo"): "solo"}
    long = assign_names([("s" * 40, "t" * 40), ("x", "t" * 40)])
    assert all(len(n) <= 64 for n in long.values()) and len(set(long.values())) == 2


def test_two_servers_tools_are_offered_beside_the_builtins_and_reach_their_server(hub,
                                                                                   servers):
    registry = registry_with(hub, servers)
    names = registry.names()
    assert "calculator" in names
    assert {"notes__lookup_word", "diary__lookup_word"} <= set(names)
    assert "lookup_word" not in names
    specs = {s.name: s for s in registry.specs()}
    assert specs["diary__lookup_word"].description.startswith("Look a word up")
    result = registry.call("diary__lookup_word", {"word": "ink"})
    assert result.ok and result.server == "diary" and result.server_tool == "lookup_word"
    assert result.content.startswith("ink: a test word")
    assert result.source == "mcp:diary" and result.elapsed_ms is not None
    assert registry.call("calculator", {"expression": "2+3"}).content.endswith("5")
    registry.close()


def test_a_switched_off_tool_is_neither_offered_nor_callable(hub, servers):
    notes = replace(servers[0], disabled_tools=("lookup_word", "big"))
    registry = registry_with(hub, [notes])
    assert "lookup_word" not in registry.names() and "big" not in registry.names()
    assert "picture" in registry.names()
    refused = registry.call("lookup_word", {"word": "x"})
    assert refused.error == "unknown tool 'lookup_word'"
    registry.close()


def test_leases_share_one_process_until_the_last_is_released(hub, tmp_path):
    pid_file = tmp_path / "pid"
    settings = stdio_server("shared", "--pid-file", str(pid_file))
    first = hub.lease([settings])
    first.wait_settled(START_S)
    pid = read_pid(pid_file)
    second = hub.lease([replace(settings, consent="always", disabled_tools=("big",))])
    assert second.wait_settled(START_S)[0].state == "ready"
    assert read_pid(pid_file) == pid  # consent and switches are the lease's: same process
    first.close()
    assert process_alive(pid)
    assert "big" not in {t.name for t in second.tools()}
    second.close()
    assert_gone(pid)
    assert hub.running() == []


def test_restart_gives_the_lease_a_new_process(hub, tmp_path):
    pid_file = tmp_path / "pid"
    lease = hub.lease([stdio_server("again", "--pid-file", str(pid_file))])
    lease.wait_settled(START_S)
    old = read_pid(pid_file)
    pid_file.unlink()
    assert hub.restart("again")
    lease.wait_settled(START_S)
    assert read_pid(pid_file) != old and not process_alive(old)
    assert any(t.name == "lookup_word" for t in lease.tools())
    lease.close()


def _events(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("consent, done", [("never", False), ("always", True)])
def test_never_and_always_are_kept_without_asking(hub, servers, events_file, broker, consent,
                                                  done):
    before = _events(events_file)
    registry = registry_with(hub, [replace(servers[0], consent=consent)])
    detach = broker.attach_prompt()  # a window is there, and is never asked
    try:
        result = registry.call("add_event", {"title": f"dentist {consent}", "day": "Monday"})
    finally:
        detach()
        registry.close()
    assert broker.pending() == ()
    if done:
        assert result.ok and result.content == f"Added 'dentist {consent}' on Monday (event E-17)."
        assert _events(events_file) == [*before, f"dentist {consent}|Monday"]
    else:
        assert result.error == ("add_event changes things, and the user does not allow that "
                                "for notes (Settings → Tools)")
        assert _events(events_file) == before


def test_ask_without_a_window_refuses_at_once_and_says_how_to_allow(hub, servers, events_file):
    before = _events(events_file)
    registry = registry_with(hub, [servers[0]])  # consent "ask", the default
    waited: list[str] = []
    result = registry.call("add_event", {"title": "t", "day": "d"}, on_wait=waited.append)
    registry.close()
    assert not result.ok and "no one can be asked here" in result.error
    assert '"consent": "always"' in result.error
    assert waited == [] and _events(events_file) == before
    read_only = registry_with(hub, [servers[0]]).call("lookup_word", {"word": "free"})
    assert read_only.ok  # a read-only tool needs no one's permission


def _answer_when_asked(broker: ConsentBroker, decision: str, answered: list) -> threading.Thread:
    def answer() -> None:
        wait_until(lambda: broker.pending(), 30, message="the call never asked")
        request = broker.pending()[0]
        answered.append(request)
        broker.answer(request.request_id, decision)  # type: ignore[arg-type]

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("decision", ["allow", "deny", "allow_session"])
def test_ask_waits_for_the_users_answer_and_tells_the_voice(hub, servers, events_file, broker,
                                                             decision):
    before = _events(events_file)
    registry = registry_with(hub, [servers[0]])
    detach = broker.attach_prompt()
    waited: list[str] = []
    asked: list = []
    try:
        thread = _answer_when_asked(broker, decision, asked)
        result = registry.call("add_event", {"title": "lunch", "day": "Friday"},
                               on_wait=waited.append)
        thread.join(10)
        again = registry.call("add_event", {"title": "tea", "day": "Friday"},
                              on_wait=waited.append) if decision == "allow_session" else None
    finally:
        detach()
        registry.close()
    assert waited[0] == ("(waiting for the user to allow add_event on notes: say that you "
                         "need their permission on the screen and wait)")
    request = asked[0]
    assert (request.server, request.tool) == ("notes", "add_event")
    assert dict(request.arguments) == {"title": "lunch", "day": "Friday"}
    if decision == "deny":
        assert result.error == "the user did not allow add_event on notes"
        assert _events(events_file) == before
        return
    assert result.ok, result.error
    assert _events(events_file)[len(before)] == "lunch|Friday"
    if decision == "allow_session":
        assert again is not None and again.ok and len(waited) == 1  # not asked twice


def test_an_unanswered_or_cancelled_question_refuses_the_call(hub, servers, events_file):
    broker = ConsentBroker(timeout_s=0.5)
    hub.consent = broker
    before = _events(events_file)
    registry = registry_with(hub, [servers[0]])
    detach = broker.attach_prompt()
    try:
        late = registry.call("add_event", {"title": "late", "day": "d"})
        cancel = threading.Event()
        cancel.set()
        broker.timeout_s = 30.0
        cancelled = registry.call("add_event", {"title": "gone", "day": "d"}, cancel)
    finally:
        detach()
        registry.close()
    assert late.error == "the user did not answer within 0.5 s"
    assert cancelled.error == "the request was cancelled before the user answered"
    assert _events(events_file) == before and broker.pending() == ()
