"""A person on call, in a real browser: headless Chromium loads the incident list and an incident
page from a live ``oximeter analyze``, acknowledges and resolves it with the page's forms, and the
acknowledgement shows in the API and in the next chat message. Screenshots are saved and their
paths printed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from browser import Browser, chromium_argv
from chat_receiver import ChatReceiver
from test_reporter_daemon import _signals

from stack.ports import wait_port
from stack.procs import ManagedProcess, http_ok, oximeter_argv, wait_until

WRITE = "browser-write-token"


@pytest.fixture
def browser(tmp_path: Path, start_process: Callable[..., ManagedProcess]) -> Iterator[Browser]:
    profile = tmp_path / "chromium-profile"
    page = Browser(start_process("chromium", chromium_argv(profile)), profile)
    yield page
    page.close()


def test_the_incident_page_in_a_browser(tmp_path: Path, receiver: ChatReceiver, browser: Browser,
                                        start_process: Callable[..., ManagedProcess]) -> None:
    (tmp_path / "oximeter.yaml").write_text(json.dumps({"analyzer": {"interval_s": 2}, "reporter": {
        "channels": {"chat": {"type": "webhook", "url_env": "CHAT_URL", "secret_env": "CHAT_SECRET"}}}}))
    env = {"CHAT_URL": receiver.url("webhook"), "CHAT_SECRET": receiver.secrets["webhook"] or "",
           "OXIMETER_API_TOKEN": WRITE}
    signals = _signals(tmp_path / "s.parquet")
    daemon = start_process("analyze", oximeter_argv(
        "--config", str(tmp_path / "oximeter.yaml"), "analyze", "--signals", str(signals),
        "--replay-start", "2026-03-02T10:10:00Z", "--speed", "1", "--store", str(tmp_path / "oximeter.db"),
        "--port", "0", "--port-file", str(tmp_path / "api.port")), env=env)
    port = wait_port(daemon, tmp_path / "api.port")
    base = f"http://127.0.0.1:{port}"
    daemon.wait_ready(lambda: http_ok(f"{base}/openapi.json"), 60)
    wait_until(lambda: receiver.accepted("webhook"), 60, what="the incident's first message in chat")
    (opened,) = receiver.accepted("webhook")
    incident_id = opened.data["idempotency_key"].rsplit(":", 2)[0]
    page_link = next(link["url"] for link in opened.data["links"] if link["label"] == "Incident")
    assert page_link == f"{base}/incidents/{incident_id}"

    browser.open(f"{base}/incidents")
    assert incident_id in browser.text() and "xid_critical" in browser.text()
    shots = [browser.screenshot(tmp_path / "incident-list.png")]
    browser.open(page_link)
    shown = browser.text()
    assert "Evidence against baseline" in shown and "Timeline" in shown and "opened" in shown
    assert browser.run("document.querySelectorAll('svg.chart').length") == 2
    assert browser.run("document.querySelectorAll('script').length") == 0
    shots.append(browser.screenshot(tmp_path / "incident-page.png"))

    def submit(verb: str, note: str) -> None:
        browser.run(f"""(() => {{ const f = document.querySelector("form[action$='/{verb}']");
            f.by.value = 'grace'; f.note.value = {json.dumps(note)}; f.token.value = {json.dumps(WRITE)};
            f.querySelector('button').click(); }})()""", navigates=True)

    submit("ack", "draining n1")
    assert "acknowledged\tby grace: draining n1" in browser.text()
    shots.append(browser.screenshot(tmp_path / "incident-acknowledged.png"))
    acks = requests.get(f"{base}/api/incidents/{incident_id}", timeout=10).json()["acks"]
    assert [(a["by"], a["note"]) for a in acks] == [("grace", "draining n1")]
    # The next message (an acknowledged incident still tells its resolve) says who acknowledged it.
    submit("resolve", "GPU drained")
    wait_until(lambda: len(receiver.accepted("webhook")) == 2, 60, what="the resolve in chat")
    resolved = receiver.accepted("webhook")[1].data
    assert resolved["title"].startswith("RESOLVED: ")
    since = next(s["body"] for s in resolved["sections"] if s["title"] == "Since the last message")
    assert "acknowledged: by grace: draining n1" in since
    assert daemon.stop() == 0 and receiver.problems == []
    for shot in shots:
        assert shot.read_bytes().startswith(b"\x89PNG")
        print(f"screenshot: {shot}")
