"""A headless Chromium driven through chromedriver's W3C WebDriver HTTP API (no client library):
open a page, run JavaScript in it, type into an element. Debian's `chromium` and
`chromium-driver` (.ci/run installs them)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"]
KEY = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference


def available() -> bool:
    return bool(shutil.which("chromium") and shutil.which("chromedriver"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    def __init__(self, timeout: float = 60):
        self.port = _free_port()
        self.proc = subprocess.Popen([shutil.which("chromedriver"), f"--port={self.port}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        end = time.monotonic() + timeout
        while True:
            try:
                self._call("GET", "/status")
                break
            except OSError:
                if time.monotonic() > end:
                    self.proc.kill()
                    raise
                time.sleep(0.2)
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": shutil.which("chromium"), "args": FLAGS}}}}
        self.session = self._call("POST", "/session", caps)["sessionId"]

    def _call(self, method: str, path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read() or b"{}").get("value")

    def _s(self, method: str, path: str, body: dict | None = None):
        return self._call(method, f"/session/{self.session}{path}", body)

    def get(self, url: str) -> None:
        self._s("POST", "/url", {"url": url})

    def js(self, script: str, *args):
        """Run ``script`` (a function body: ``return ...``) in the page."""
        return self._s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def type_into(self, css: str, text: str) -> None:
        el = self._s("POST", "/element", {"using": "css selector", "value": css})[KEY]
        self._s("POST", f"/element/{el}/value", {"text": text})

    def wait(self, script: str, timeout: float = 20):
        """Poll ``script`` until it returns something true; returns that."""
        end = time.monotonic() + timeout
        while True:
            v = self.js(script)
            if v or time.monotonic() > end:
                return v
            time.sleep(0.1)

    def close(self) -> None:
        try:
            self._call("DELETE", f"/session/{self.session}")
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=20)
