"""The HTML reports opened in a real headless Chromium: the DOM shows the findings, log text stays text,
the page's own script runs (under its Content-Security-Policy) and nothing is fetched from the network.

Screenshots (light and dark) are written to $TOOLREPLAY_SCREENSHOTS when set, else to a temporary folder.
"""

from __future__ import annotations

import http.server
import json
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


class WhereTest(unittest.TestCase):
    """The fleet page's first screen names and links each broken chain, unreadable file and session with unknown
    outcomes; the timeline marks blocked, approved, shadow and unknown calls apart; log text stays text."""

    def setUp(self) -> None:
        require(CHROMIUM is not None, "chromium is not installed (apt-get install chromium)")
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.fleet = os.path.join(folder.name, "fleet")
        os.makedirs(self.fleet)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counter)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)
        leak = f"http://127.0.0.1:{self.server.server_address[1]}"
        evil = f"<img src={leak}/x>"
        records = [
            ("read", {"ok": False, "error": f"denied by rule r1: {evil}"}, {"outcome": "refused"}),
            ("write", {}, {"outcome": "ran", "x-approval": evil}),
            ("write", {}, {"outcome": "ran", "x-shadow": [{"rule": "strict", "effect": "deny", "reason": evil}]}),
            ("send", {"ok": False, "error": f"outcome unknown: {evil}"}, {"outcome": "unknown"})]
        lines = [json.dumps({"index": index, "tool": tool, "args": {"n": index}, "response": response, "meta": meta})
                 for index, (tool, response, meta) in enumerate(records)]
        with open(os.path.join(self.fleet, "guarded <b>.jsonl"), "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        with open(os.path.join(self.fleet, "torn.jsonl"), "w", encoding="utf-8") as handle:
            handle.write('{"index": 0, "tool": "t", "args": {}, "response": {}}\n[]\n')
        plain = os.path.join(folder.name, "plain.jsonl")
        shutil.copy(os.path.join(SAMPLES, "session-clean.jsonl"), plain)
        io = IO.memory()
        main(["seal", plain], io)
        with open(os.path.join(self.fleet, "sealed.jsonl"), "w", encoding="utf-8") as handle:
            handle.write(io.out().replace('"index":1,"tool":"', '"index":1,"tool":"x', 1))
        self.page = os.path.join(folder.name, "fleet.html")
        self.assertEqual(main(["audit", self.fleet, "--format", "html", "-o", self.page, "--allow-unreadable"],
                              IO.memory()), 1)

    def test_the_first_screen_says_where(self) -> None:
        _Counter.hits.clear()
        dom = chromium(f"file://{self.page}", "--dump-dom")
        where = dom[dom.index('<section class="panel where" id="where">'):]
        where = where[:where.index("</section>")]
        self.assertLess(dom.index('id="where"'), dom.index("Findings by kind"))  # before the charts
        self.assertIn('<b>Broken chains (1)</b>', where)
        self.assertIn('<a class="path" href="#broken-0">sealed.jsonl</a> <span class="why">first broken link: index 1'
                      '</span>', where)
        self.assertIn('<b>Unreadable files (1)</b>', where)
        self.assertIn('<a class="path" href="#unreadable-0">torn.jsonl</a>', where)
        self.assertIn('<b>Sessions with unknown outcomes (1)</b>', where)
        self.assertIn('<a class="path" href="#s0">guarded &lt;b&gt;.jsonl</a> <span class="why">1 call with an unknown '
                      'outcome</span>', where)
        for target in ("broken-0", "unreadable-0", "s0"):  # every link lands somewhere on the page
            self.assertIn(f'id="{target}"', dom)
        for mark, label in (("blocked", "blocked"), ("approved", "approved"), ("shadow", "shadow"),
                            ("unknown", "unknown outcome")):
            self.assertIn(f'<span class="mark m-{mark}">{label}</span>', dom)
            self.assertRegex(dom, f'<li id="s0-c\\d" class="lazy hit m-{mark}"')
        self.assertIn("&lt;img src=", dom)
        self.assertNotIn("<img", dom)
        self.assertEqual(dom.count("<script>"), 1)
        self.assertEqual(_Counter.hits, [], "the page fetched something")
        shot = os.path.join(os.path.dirname(self.page), "where.png")
        chromium(f"file://{self.page}", "--window-size=1280,1000", f"--screenshot={shot}")
        with open(shot, "rb") as handle:
            self.assertEqual(handle.read(8), b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
    unittest.main()
