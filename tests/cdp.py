"""Open a page in headless Chromium and watch it through the DevTools protocol.

``load_page`` starts Debian's ``chromium`` with a fresh profile and ``--remote-debugging-port=0``,
reads the port Chromium chose from ``DevToolsActivePort``, attaches to a new tab over a websocket,
loads the URL and returns what the page reported: console messages, exceptions, log entries
(CSP violations and failed loads land there), the value of a JavaScript expression evaluated
after ``load``, and a full-page PNG screenshot.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

from envhub.sandboxes.spawner import stop

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--remote-debugging-port=0", "--window-size=1280,1024"]


def chromium() -> str | None:
    return shutil.which("chromium")


@dataclass
class PageResult:
    console: list[dict[str, Any]] = field(default_factory=list)  # Runtime.consoleAPICalled params
    exceptions: list[dict[str, Any]] = field(default_factory=list)  # Runtime.exceptionThrown params
    log: list[dict[str, Any]] = field(default_factory=list)  # Log.entryAdded entries
    dialogs: list[str] = field(default_factory=list)  # alert / confirm / prompt messages (dismissed)
    value: Any = None
    screenshot: bytes = b""

    def errors(self) -> list[str]:
        out = [f"console.{c['type']}: {[a.get('value') for a in c.get('args', [])]}"
               for c in self.console if c["type"] in ("error", "assert", "warning")]
        out += [f"exception: {e['exceptionDetails'].get('text')}" for e in self.exceptions]
        out += [f"log {e['level']} ({e.get('source')}): {e.get('text')}" for e in self.log
                if e["level"] in ("error", "warning")]
        out += [f"dialog: {d}" for d in self.dialogs]
        return out


class _Session:
    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def _recv(self, deadline: float) -> dict[str, Any]:
        """The next message; a JavaScript dialog (it would block the page) is dismissed and kept."""
        msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
        if msg.get("method") == "Page.javascriptDialogOpening":
            self.ws.send(json.dumps({"id": next(self.ids), "method": "Page.handleJavaScriptDialog",
                                     "params": {"accept": False}, "sessionId": msg.get("sessionId")}))
        return msg

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict[str, Any]:
        msg_id = next(self.ids)
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            reply = self._recv(deadline)
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, ev in enumerate(self.events):
                if ev.get("method") == method:
                    return self.events.pop(i)
            self.events.append(self._recv(deadline))


def load_page(url: str, expression: str, *, settle_s: float = 0.5, timeout: float = 60.0) -> PageResult:
    """Load ``url``; after ``load`` (and ``settle_s`` for late errors) evaluate ``expression``."""
    binary = chromium()
    assert binary, "chromium is not installed (scripts/setup.sh installs it)"
    profile = tempfile.mkdtemp(prefix="envhub-chromium-")
    proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = Path(profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            assert proc.poll() is None, f"chromium exited with {proc.returncode}"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.1)
        port, path = port_file.read_text().splitlines()[:2]
        result = PageResult()
        with connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=timeout) as ws:
            s = _Session(ws)
            target = s.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            sid = s.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Runtime", "Log", "Page"):
                s.call(f"{domain}.enable", session=sid)
            s.call("Page.navigate", {"url": url}, session=sid)
            s.wait_event("Page.loadEventFired", timeout)
            time.sleep(settle_s)
            value = s.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=sid)
            result.value = value["result"].get("value")
            shot = s.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session=sid)
            result.screenshot = base64.b64decode(shot["data"])
            for ev in s.events:
                params = ev.get("params", {})
                if ev.get("method") == "Runtime.consoleAPICalled":
                    result.console.append(params)
                elif ev.get("method") == "Runtime.exceptionThrown":
                    result.exceptions.append(params)
                elif ev.get("method") == "Log.entryAdded":
                    result.log.append(params["entry"])
                elif ev.get("method") == "Page.javascriptDialogOpening":
                    result.dialogs.append(f"{params.get('type')}: {params.get('message')}")
            s.call("Browser.close")
        return result
    finally:
        stop(proc, 10)
        shutil.rmtree(profile, ignore_errors=True)
