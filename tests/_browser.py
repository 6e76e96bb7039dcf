"""A headless Chromium driven over the DevTools protocol, with the standard
library only (``--remote-debugging-pipe``: JSON messages ended by NUL on file
descriptors 3 and 4). Used by tests/test_html.py and benchmarks/bench_html.py.

``Browser().open(path)`` loads a page and returns a ``Page``: ``evaluate(js)``
runs an expression and returns its value; ``errors`` holds every console
error, uncaught exception and failed request the page produced.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    def __init__(self, width: int = 1280, height: int = 900, timeout: float = 60.0):
        exe = chromium()
        if exe is None:
            raise RuntimeError("no chromium on PATH")
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="jmp-chromium-")
        to_chrome_r, self._w = os.pipe()  # we write, chromium reads fd 3
        self._r, from_chrome_w = os.pipe()  # chromium writes fd 4, we read

        def child_fds():  # the two pipe ends as fds 3 and 4 (copies first: either may be 3 or 4)
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--mute-audio", f"--window-size={width},{height}", f"--user-data-dir={self.profile}",
                "about:blank"]
        self.proc = subprocess.Popen(args, preexec_fn=child_fds, close_fds=False,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._id = 0
        self._buf = b""
        self._events: list = []
        self._replies: dict = {}
        self._lock = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.width, self.height = width, height

    def _read(self):
        while True:
            try:
                chunk = os.read(self._r, 1 << 16)
            except OSError:
                chunk = b""
            with self._lock:
                if not chunk:
                    self._replies[None] = "closed"
                    self._lock.notify_all()
                    return
                self._buf += chunk
                while b"\0" in self._buf:
                    raw, self._buf = self._buf.split(b"\0", 1)
                    msg = json.loads(raw)
                    if "id" in msg:
                        self._replies[msg["id"]] = msg
                    else:
                        self._events.append(msg)
                self._lock.notify_all()

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._id += 1
        mid = self._id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        with self._lock:
            while mid not in self._replies:
                if None in self._replies:
                    raise RuntimeError("chromium closed the pipe")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no reply to {method}")
                self._lock.wait(left)
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, session: str, since: int = 0) -> dict:
        deadline = time.monotonic() + self.timeout
        with self._lock:
            while True:
                for ev in self._events[since:]:
                    if ev.get("method") == method and ev.get("sessionId") == session:
                        return ev
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no {method}")
                self._lock.wait(left)

    def events(self, session: str) -> list:
        with self._lock:
            return [e for e in self._events if e.get("sessionId") == session]

    def open(self, path) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", {}, session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                         "deviceScaleFactor": 1, "mobile": False}, session)
        with self._lock:
            since = len(self._events)
        url = Path(path).resolve().as_uri()
        t0 = time.perf_counter()
        self.send("Page.navigate", {"url": url}, session)
        self.wait_event("Page.loadEventFired", session, since)
        load_s = time.perf_counter() - t0
        return Page(self, session, target, load_s)

    def close(self):
        try:
            self.send("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._w, self._r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Page:
    def __init__(self, browser: Browser, session: str, target: str, load_s: float):
        self.browser, self.session, self.target, self.load_s = browser, session, target, load_s

    def evaluate(self, expression: str):
        r = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                   "awaitPromise": True}, self.session)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression!r} raised: {r['exceptionDetails']}")
        return r["result"].get("value")

    @property
    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions, failed requests and errors
        logged by the browser itself, as text."""
        out = []
        for ev in self.browser.events(self.session):
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console." + p["type"] + ": " + " ".join(str(a.get("value", a.get("description")))
                                                                    for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append("log: " + p["entry"].get("text", ""))
            elif m == "Page.javascriptDialogOpening":
                out.append(f"dialog ({p.get('type')}): {p.get('message')}")
            elif m == "Network.loadingFailed":
                out.append("request failed: " + str(p.get("errorText")))
            elif m == "Network.requestWillBeSent" and not p.get("request", {}).get("url", "").startswith(
                    ("file:", "data:", "about:")):
                out.append("network request: " + p["request"]["url"])
        return out

    def screenshot(self, path, full_page: bool = True) -> None:
        import base64

        params = {"format": "png"}
        if full_page:
            h = self.evaluate("document.documentElement.scrollHeight")
            params["clip"] = {"x": 0, "y": 0, "width": self.browser.width, "height": h, "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.browser.send("Page.captureScreenshot", params, self.session)["data"]
        Path(path).write_bytes(base64.b64decode(data))
