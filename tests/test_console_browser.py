"""The console in a real headless Chromium (driven through the DevTools protocol): a session appears while a
guarded library Gate writes it, a write waiting in the inbox is approved from the page and runs, another is
denied and refused, hostile names render as text, and nothing is fetched from elsewhere.

Screenshots are written to $TOOLREPLAY_SCREENSHOTS when set, else to a temporary folder.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import tempfile
import threading
import time
import unittest
from typing import Any
from urllib.parse import urlencode

from tests.cdp import CHROMIUM, Browser
from tests.support import require
from tests.test_report_html import _Counter as CountingHandler
from toolreplay.console.server import Console, serve
from toolreplay.format.records import read_session
from toolreplay.guard.gate import Gate
from toolreplay.guard.inbox import Inbox
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.model import Policy

INTEGRATION_TIER = True
EVIL = "<script>window.pwned=1</script><img src=x>"


class _Counter(CountingHandler):
    hits: list[str] = []  # this module's own: the report's tests count theirs apart


class ConsoleInBrowserTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        require(CHROMIUM is not None, "chromium is not installed (apt-get install chromium)")
        cls.tmp = tempfile.mkdtemp()
        cls.records = os.path.join(cls.tmp, "records")
        os.makedirs(cls.records)
        cls.console = Console([cls.records], person="tester")
        cls.server = serve(cls.console, "127.0.0.1", 0)
        threading.Thread(target=cls.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        cls.base = f"http://127.0.0.1:{cls.server.server_address[1]}"
        cls.leak = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counter)
        threading.Thread(target=cls.leak.serve_forever, daemon=True).start()
        cls.leak_url = f"http://127.0.0.1:{cls.leak.server_address[1]}"
        cls.shots = os.environ.get("TOOLREPLAY_SCREENSHOTS") or os.path.join(cls.tmp, "shots")
        os.makedirs(cls.shots, exist_ok=True)
        cls.browser = Browser()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.browser.close()
        cls.server.shutdown()
        cls.server.server_close()
        cls.console.stop()
        cls.leak.shutdown()
        cls.leak.server_close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def gate(self, name: str, tools: dict[str, Any], policy: Policy, **options: Any) -> tuple[Gate, SessionRecorder]:
        recorder = SessionRecorder.open(os.path.join(self.records, name))
        self.addCleanup(recorder.close)
        return Gate(tools, policy, recorder=recorder, **options), recorder

    def text(self) -> str:
        value = self.browser.evaluate("document.querySelector('main').innerText")
        assert isinstance(value, str)
        return value

    def test_1_a_session_appears_while_the_gate_writes_it(self) -> None:
        self.browser.navigate(self.base + "/")
        self.browser.evaluate("window.samePage = 1")
        policy = Policy("notes", frozenset({"read_note"}), frozenset())
        gate, _ = self.gate("live.jsonl", {"read_note": lambda n: {"text": f"note {n}"}}, policy)
        gate.call("read_note", {"n": 1})
        took = self.browser.wait_for("document.querySelector('main').innerText.includes('records/live.jsonl')")
        self.assertLess(took, 3)
        for n in range(2, 5):
            gate.call("read_note", {"n": n})
        self.browser.wait_for("[...document.querySelectorAll('#sessions tbody tr')].some(tr => "
                              "tr.innerText.includes('live.jsonl') && tr.children[1].innerText === '4')")
        self.assertEqual(self.browser.evaluate("window.samePage"), 1)  # updated in place, not reloaded
        self.browser.screenshot(os.path.join(self.shots, "console-sessions.png"))

    def _waiting_write(self, name: str) -> tuple[threading.Thread, dict[str, Any], list[str], str]:
        notes: list[str] = []
        policy = Policy("notes", frozenset({"write_note"}), frozenset({"write_note"}))
        inbox = Inbox(self.records, session=name, front_end="library", timeout=30)
        gate, _ = self.gate(name, {"write_note": lambda text: notes.append(text) or {"ok": True}}, policy,
                            confirm=inbox)
        answer: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: answer.update(gate.call("write_note", {"text": name})))
        thread.start()
        return thread, answer, notes, os.path.join(self.records, name)

    def _click(self, value: str) -> None:
        self.browser.wait_for("document.querySelector('section.request button[value=\"" + value + "\"]')")
        self.browser.evaluate("document.querySelector('section.request button[value=\"" + value + "\"]').click()")

    def _decided_by(self, path: str) -> list[tuple[str, Any]]:
        with open(path, "rb") as handle:
            return [(record.outcome, (record.meta or {}).get("x-decided-by")) for record in read_session(handle, path)]

    def test_2_a_waiting_write_is_approved_from_the_page_and_runs(self) -> None:
        self.browser.navigate(self.base + "/inbox")
        thread, answer, notes, path = self._waiting_write("approve.jsonl")
        self.browser.wait_for("document.querySelector('section.request')")  # appears without a reload
        self.browser.screenshot(os.path.join(self.shots, "console-inbox.png"))
        self._click("approve:once")
        thread.join(10)
        self.assertEqual((answer, notes), ({"ok": True}, ["approve.jsonl"]))
        self.assertEqual(self._decided_by(path), [("ran", "tester")])
        self.browser.wait_for("document.querySelector('main').innerText.includes('approved once')")
        self.assertIn("No call is waiting for a person.", self.text())

    def test_3_another_is_denied_and_refused(self) -> None:
        self.browser.navigate(self.base + "/inbox")
        thread, answer, notes, path = self._waiting_write("deny.jsonl")
        self._click("deny:once")
        thread.join(10)
        self.assertEqual((answer, notes), ({"ok": False, "error": "confirmation declined"}, []))
        self.assertEqual(self._decided_by(path), [("refused", "tester")])
        self.browser.navigate(self.base + "/session?" + urlencode({"path": path}))
        self.assertIn("confirmation declined; decided by tester", self.text())
        self.browser.screenshot(os.path.join(self.shots, "console-session-denied.png"))

    def test_4_hostile_names_render_as_text(self) -> None:
        hostile = {"q": f'<img src="{self.leak_url}/args">'}
        policy = Policy("evil", frozenset({EVIL}), frozenset())
        gate, _ = self.gate("evil.jsonl", {EVIL: lambda q: {"r": f'<img src="{self.leak_url}/response">'}}, policy)
        gate.call(EVIL, hostile)
        path = os.path.join(self.records, "evil.jsonl")
        self.browser.navigate(self.base + "/")
        self.browser.wait_for("document.querySelector('main').innerText.includes('evil.jsonl')")
        self.browser.navigate(self.base + "/session?" + urlencode({"path": path}))
        self.browser.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        text = self.text()
        self.assertIn(EVIL, text)
        self.assertIn(json.dumps(hostile, separators=(",", ":")), text)
        self.assertEqual(self.browser.evaluate("document.querySelectorAll('main img, main script').length"), 0)
        self.assertIsNone(self.browser.evaluate("window.pwned"))
        self.browser.screenshot(os.path.join(self.shots, "console-session.png"))
        # the same name waiting in the inbox
        inbox = Inbox(self.records, session="evil.jsonl", timeout=30)
        done: list[Any] = []
        thread = threading.Thread(target=lambda: done.append(inbox.ask(EVIL, hostile)))
        thread.start()
        self.browser.navigate(self.base + "/inbox")
        self.browser.wait_for("document.querySelector('section.request')")
        self.assertIn(EVIL, self.text())
        self.assertEqual(self.browser.evaluate("document.querySelectorAll('main img, main script').length"), 0)
        self._click("deny:once")
        thread.join(10)
        time.sleep(0.3)
        self.assertEqual(_Counter.hits, [])  # nothing was fetched from the leak server

    def test_5_every_session_with_its_counts(self) -> None:
        self.browser.navigate(self.base + "/")
        self.browser.wait_for("document.querySelectorAll('#sessions tbody tr').length === 4")
        rows = self.browser.evaluate("[...document.querySelectorAll('#sessions tbody tr')].map(tr => "
                                     "[...tr.children].slice(0, 6).map(td => td.innerText)).sort()")
        self.assertEqual(rows, [["records/approve.jsonl", "1", "1", "0", "1", "0"],
                                ["records/deny.jsonl", "1", "0", "1", "0", "0"],
                                ["records/evil.jsonl", "1", "1", "0", "0", "0"],
                                ["records/live.jsonl", "4", "4", "0", "0", "0"]])
        self.browser.screenshot(os.path.join(self.shots, "console-overview.png"))


if __name__ == "__main__":
    unittest.main()
