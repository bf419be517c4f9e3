"""The HTML reports opened in a real headless Chromium: the DOM shows the findings, log text stays text,
the page's own script runs (under its Content-Security-Policy) and nothing is fetched from the network.

Screenshots (light and dark) are written to $TOOLREPLAY_SCREENSHOTS when set, else to a temporary folder.
"""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import tempfile
import threading
import unittest

from tests.support import require
from toolreplay.cli import main
from toolreplay.cli._io import IO

INTEGRATION_TIER = True  # the integration tier (tests/unit.py leaves this module out)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
EVIL = "<script>alert(1)</script>"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
DARK = ("--force-dark-mode", "--blink-settings=preferredColorScheme=0")


def chromium(url: str, *extra: str) -> str:
    """Run headless Chromium on `url` in a fresh profile; its standard output."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, url],
                              capture_output=True, timeout=120, check=False)
    return done.stdout.decode("utf-8")


class _Counter(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        self.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the signature http.server calls
        pass


class ReportInBrowserTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.mkdtemp()
        cls.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counter)
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.leak = f"http://127.0.0.1:{cls.server.server_address[1]}"
        fleet = os.path.join(cls.tmp, "fleet")
        os.makedirs(fleet)
        shutil.copy(os.path.join(SAMPLES, "session-dirty.jsonl"), os.path.join(fleet, "dirty.jsonl"))
        shutil.copy(os.path.join(SAMPLES, "session-clean.jsonl"), os.path.join(fleet, "clean.jsonl"))
        evil_call = ('{"index": %d, "tool": "<script>alert(1)</script>", "args": {"q": "<img src=' + cls.leak
                     + '/args>"}, "response": {"r": "<img src=' + cls.leak + '/response>"}}\n')
        with open(os.path.join(fleet, "evil.jsonl"), "w", encoding="utf-8") as handle:
            handle.write(evil_call % 0 + evil_call % 1)
        cls.fleet_page = os.path.join(cls.tmp, "fleet.html")
        code = main(["audit", fleet, "--format", "html", "-o", cls.fleet_page], IO.memory())
        assert code == 1, code
        io = IO.memory()
        main(["replay", os.path.join(fleet, "dirty.jsonl"), "--format", "html"], io)
        cls.session_page = os.path.join(cls.tmp, "session.html")
        with open(cls.session_page, "w", encoding="utf-8") as handle:
            handle.write(io.out())
        cls.shots = os.environ.get("TOOLREPLAY_SCREENSHOTS") or os.path.join(cls.tmp, "shots")
        os.makedirs(cls.shots, exist_ok=True)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.shutdown()
        cls.server.server_close()
        shutil.rmtree(cls.tmp)

    def setUp(self) -> None:
        require(CHROMIUM is not None, "chromium is not installed (apt-get install chromium)")

    def test_fleet_page_shows_findings_and_escapes_log_text(self) -> None:
        _Counter.hits.clear()
        dom = chromium(f"file://{self.fleet_page}#s0", "--dump-dom")
        self.assertIn("<h1>Fleet audit</h1>", dom)
        self.assertIn("tool 'read_file' repeats the identical call at index 1 with no state change between them", dom)
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt;", dom)
        self.assertEqual(dom.count("<script>"), 1, "only the page's own script runs")
        self.assertEqual(dom.count('<script type="application/json" id="rows">'), 1)
        self.assertIn("showing 3 of 3", dom)  # the sessions table, drawn by the page's script from its data
        self.assertIn('<td class="path"><a href="#s1">evil.jsonl</a></td>', dom)
        self.assertNotIn("<img", dom)
        # the page's script ran under the policy: following a link opened the detailed session it points to
        self.assertIn('<details class="session" id="s0" open="">', dom)
        self.assertEqual(_Counter.hits, [], "the page fetched something")

    def test_session_page_timeline(self) -> None:
        _Counter.hits.clear()
        dom = chromium(f"file://{self.session_page}#c5", "--dump-dom")
        self.assertIn('<li id="c5" class="lazy hit"', dom)
        self.assertIn('<details class="call" open="">', dom)  # opened by the link to it
        self.assertIn("first response, index 3", dom)
        self.assertIn('<a href="#c3">see index 3</a>', dom)
        self.assertIn("divergence at <a href=\"#c5\">index 5</a>", dom)
        self.assertEqual(_Counter.hits, [])

    def test_the_network_check_would_see_a_fetch(self) -> None:
        canary = os.path.join(self.tmp, "canary.html")
        with open(canary, "w", encoding="utf-8") as handle:
            handle.write(f'<!DOCTYPE html><img src="{self.leak}/canary">')
        _Counter.hits.clear()
        chromium(f"file://{canary}", "--dump-dom")
        self.assertEqual(_Counter.hits, ["/canary"])

    def test_screenshots_light_and_dark(self) -> None:
        for name, page, extra in (("fleet-light", self.fleet_page, ()), ("fleet-dark", self.fleet_page, DARK),
                                  ("session-dark", self.session_page + "#c5", DARK)):
            target = os.path.join(self.shots, f"{name}.png")
            chromium(f"file://{page}", "--window-size=1280,1000", f"--screenshot={target}", *extra)
            with open(target, "rb") as handle:
                self.assertEqual(handle.read(8), b"\x89PNG\r\n\x1a\n", name)


if __name__ == "__main__":
    unittest.main()
