"""A headless Chromium driven through the DevTools protocol over a pipe (``--remote-debugging-pipe``: JSON
messages separated by NUL bytes on fds 3 and 4), stdlib only. One browser serves many pages: each page is opened
in a new target, its console errors and uncaught exceptions are collected, an expression is evaluated in it and a
screenshot is taken. Used by tests/test_report_browser.py; ``python3 tests/cdp_browser.py PAGE.html OUT.png [Y]`` takes
one screenshot by hand."""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def find_chromium() -> str | None:
    for p in CHROMIUM:
        if os.access(p, os.X_OK):
            return p
    return shutil.which("chromium")


class Browser:
    def __init__(self, exe: str, width: int = 1280, height: int = 2000, timeout: float = 30.0):
        self.width, self.height, self.timeout = width, height, timeout
        self.profile = tempfile.mkdtemp(prefix="smemtile-chromium-")  # a new, empty user data dir
        to_browser_r, self._w = os.pipe()
        self._r, from_browser_w = os.pipe()

        def fds() -> None:  # the child's fd 3 reads our commands, fd 4 writes the replies
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        self.proc = subprocess.Popen(
            [
                exe,
                *FLAGS,
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=fds,
            pass_fds=(3, 4),  # the pipes land on 3 and 4 in the child (close_fds runs after fds)
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []

    # ---- the protocol -----------------------------------------------------------------------------------------
    def _read(self) -> dict:
        while b"\0" not in self._buf:
            ready, _, _ = select.select([self._r], [], [], self.timeout)  # a hung browser fails, never blocks
            if not ready:
                raise TimeoutError(f"chromium sent nothing for {self.timeout} s")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._id += 1
        msg: dict = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            m = self._read()
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)
        raise TimeoutError(method)

    def wait_event(self, method: str, session: str) -> dict:
        deadline = time.monotonic() + self.timeout
        for k, m in enumerate(self.events):
            if m.get("method") == method and m.get("sessionId") == session:
                return self.events.pop(k)
        while time.monotonic() < deadline:
            m = self._read()
            if m.get("method") == method and m.get("sessionId") == session:
                return m
            self.events.append(m)
        raise TimeoutError(method)

    # ---- one page ---------------------------------------------------------------------------------------------
    def load(self, url: str, expression: str, clip_y: int | None = None) -> dict:
        """Open ``url``; return {"errors": [...], "value": expression's value, "png": screenshot bytes}."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for m in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.send(m, session=s)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
            s,
        )
        self.events = [e for e in self.events if e.get("sessionId") != s]
        self.send("Page.navigate", {"url": url}, s)
        self.wait_event("Page.loadEventFired", s)
        value = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, s)
        shot: dict = {"format": "png", "optimizeForSpeed": True}  # faster PNG encoding, the same pixels
        if clip_y is not None:  # a window further down the page (looking at a page by hand)
            shot.update(
                captureBeyondViewport=True,
                clip={"x": 0, "y": clip_y, "width": self.width, "height": self.height, "scale": 1},
            )
        png = base64.b64decode(self.send("Page.captureScreenshot", shot, s)["data"])
        errors = []
        for e in self.events:
            if e.get("sessionId") != s:
                continue
            p = e.get("params", {})
            if e.get("method") == "Runtime.exceptionThrown":
                errors.append(
                    "exception: "
                    + p.get("exceptionDetails", {}).get("text", "")
                    + " "
                    + str(p.get("exceptionDetails", {}).get("exception", {}).get("description", ""))
                )
            elif e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append(
                    "console.error: "
                    + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                )
            elif e.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                errors.append(f"log: {p['entry'].get('source')}: {p['entry'].get('text')}")
        self.events = [e for e in self.events if e.get("sessionId") != s]
        self.send("Target.closeTarget", {"targetId": target})
        return {"errors": errors, "value": value.get("result", {}).get("value"), "png": png}

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


if __name__ == "__main__":
    exe = find_chromium()
    if exe is None:
        sys.exit("no chromium")
    br = Browser(exe)
    try:
        r = br.load(
            Path(sys.argv[1]).resolve().as_uri(),
            "document.body.scrollHeight",
            int(sys.argv[3]) if len(sys.argv) > 3 else None,
        )
    finally:
        br.close()
    Path(sys.argv[2]).write_bytes(r["png"])
    print("page height", r["value"], "errors", r["errors"])
