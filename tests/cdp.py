"""A small Chrome DevTools Protocol client over `--remote-debugging-pipe` (standard library only): headless
Chromium in a fresh profile, one page, commands and evaluation, screenshots. For the browser tests."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any

__all__ = ["CHROMIUM", "Browser"]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe", "--window-size=1280,900")


class Browser:
    """Headless Chromium driven through the DevTools protocol on fds 3 (its input) and 4 (its output)."""

    def __init__(self) -> None:
        assert CHROMIUM is not None
        self._profile = tempfile.mkdtemp(prefix="toolreplay-cdp-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire() -> None:  # in the child, before exec: its fd 3 reads our commands, fd 4 writes its answers
            reading, writing = os.dup(to_browser_r), os.dup(from_browser_w)  # above 4, whatever they were
            os.dup2(reading, 3)  # inheritable, unlike the pipe's own ends
            os.dup2(writing, 4)

        self._process = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, close_fds=False, preexec_fn=wire)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next = 0
        self._lock = threading.Lock()
        self._buffer = b""
        self._answers: dict[int, dict[str, Any]] = {}
        self.session: str | None = None
        target = self.command("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.command("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.command("Page.enable")
        self.command("Runtime.enable")

    def command(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30) -> dict[str, Any]:
        """Send one command (to the page once attached) and wait for its result."""
        with self._lock:
            self._next += 1
            number = self._next
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if self.session is not None:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode("utf-8") + b"\0")
        end = time.monotonic() + timeout
        while number not in self._answers:
            if time.monotonic() > end:
                raise TimeoutError(f"no answer to {method}")
            self._read()
        answer = self._answers.pop(number)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer.get("result", {})
        return result

    def _read(self) -> None:
        data = os.read(self._from_browser, 1 << 20)
        if not data:
            raise ConnectionError("the browser ended")
        self._buffer += data
        while b"\0" in self._buffer:
            line, self._buffer = self._buffer.split(b"\0", 1)
            message = json.loads(line)
            if "id" in message:
                self._answers[message["id"]] = message

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.command("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                   "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str) -> None:
        """Open `url` and wait until its document has loaded."""
        self.command("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete' && location.href === " + json.dumps(url))

    def wait_for(self, condition: str, timeout: float = 10) -> float:
        """Wait until a JavaScript condition holds in the page; the seconds it took (TimeoutError past `timeout`)."""
        start = time.monotonic()
        while True:
            try:
                if self.evaluate(f"!!({condition})"):
                    return time.monotonic() - start
            except RuntimeError:
                pass  # between two documents
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"not true within {timeout} s: {condition}")
            time.sleep(0.02)

    def screenshot(self, path: str) -> None:
        """Save the whole page as a PNG."""
        data = self.command("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(data))

    def close(self) -> None:
        """End the browser and remove its profile."""
        try:
            self.session = None
            self.command("Browser.close", timeout=5)
        except (OSError, TimeoutError, RuntimeError, ConnectionError):
            pass
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self._profile, ignore_errors=True)
