"""The console's handlers without a socket: host, token and CSRF checks, escaping, GET changing nothing,
the index (counts, torn and unreadable records, a folder that disappears), filters, the inbox and revokes, and the
approval receipts a console signs for a guard with approvers (HMAC keys here; real OpenSSH keys in
tests/test_console_inbox.py), and the serve command's usage errors."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import unittest
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from tests.test_cli import run
from tests.test_inbox import wait_for_request
from tests.test_receipts import ALICE
from toolreplay.audit.checkpoint import Keys
from toolreplay.audit.receipts import call_digest, parse_receipt, policy_digest, verify_receipts
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.console.index import Filters, SessionIndex, select
from toolreplay.console.server import Console, Response, parse_since
from toolreplay.format.records import read_session
from toolreplay.guard.approvals import Approvals, Decided, Remember, read_approvals
from toolreplay.guard.gate import Gate
from toolreplay.guard.inbox import Inbox, decide, inbox_folder
from toolreplay.guard.receipts import Receipts
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.model import Policy, load_policy

HOST = {"Host": "127.0.0.1:8470"}
FORM = {**HOST, "Content-Type": "application/x-www-form-urlencoded"}
EVIL = "<script>alert(1)</script>"
POLICY = Policy("notes", frozenset({"write_note", "read_note", EVIL}), frozenset({"write_note", EVIL}))


def record_line(index: int, tool: str, args: dict[str, Any], response: dict[str, Any],
                meta: dict[str, Any] | None = None) -> str:
    obj: dict[str, Any] = {"index": index, "tool": tool, "args": args, "response": response}
    if meta is not None:
        obj["meta"] = meta
    return json.dumps(obj) + "\n"


class ConsoleCase(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp()
        self.records = os.path.join(self.tmp, "records")
        os.makedirs(self.records)
        self.console = Console([self.records], person="alice", audit=False)

    def tearDown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def write(self, name: str, text: str, mode: str = "w") -> str:
        path = os.path.join(self.records, name)
        with open(path, mode, encoding="utf-8") as handle:
            handle.write(text)
        return path

    def get(self, target: str, headers: dict[str, str] | None = None) -> Response:
        self.console.index.refresh()
        return self.console.handle("GET", target, headers or HOST)

    def page(self, target: str) -> str:
        response = self.get(target)
        self.assertEqual(response.status, 200, response.body[:300])
        return response.body.decode("utf-8")

    def post(self, target: str, fields: dict[str, str], headers: dict[str, str] | None = None) -> Response:
        return self.console.handle("POST", target, headers or FORM, urlencode(fields).encode("ascii"))

    def follow(self, response: Response) -> str:
        self.assertEqual(response.status, 303)
        return self.page(dict(response.headers)["Location"])


class AccessTest(ConsoleCase):
    def test_only_loopback_names_are_answered_on_loopback(self) -> None:
        for host, status in [("127.0.0.1:8470", 200), ("localhost:8470", 200), ("[::1]:8470", 200),
                             ("evil.example:8470", 421), ("", 421), ("127.0.0.1.evil.example", 421)]:
            with self.subTest(host=host):
                self.assertEqual(self.get("/", {"Host": host}).status, status)

    def test_a_token_is_needed_when_the_console_has_one(self) -> None:
        self.console = Console([self.records], token=b"T" * 20, loopback=False, audit=False)
        self.assertEqual(self.get("/").status, 401)
        self.assertIn("this console needs its token", self.get("/").body.decode())
        self.assertEqual(self.get("/", {**HOST, "Authorization": "Bearer " + "T" * 20}).status, 200)
        self.assertEqual(self.get("/", {**HOST, "Authorization": "Bearer " + "U" * 20}).status, 401)
        login = self.get("/inbox?token=" + "T" * 20)
        self.assertEqual(login.status, 303)
        headers = dict(login.headers)
        self.assertEqual(headers["Location"], "/inbox")
        self.assertEqual(headers["Set-Cookie"], "toolreplay-console=" + "T" * 20 + "; HttpOnly; SameSite=Strict; Path=/")
        self.assertEqual(self.get("/inbox?token=wrong").status, 401)
        self.assertEqual(self.get("/", {**HOST, "Cookie": "toolreplay-console=" + "T" * 20}).status, 200)
        self.assertEqual(self.get("/", {**HOST, "Cookie": "toolreplay-console=nope"}).status, 401)
        self.assertEqual(self.get("/", {**HOST, "Cookie": "\x00;;=bad"}).status, 401)
        # public: any Host, the token still needed
        self.assertEqual(self.get("/", {"Host": "console.example", "Authorization": "Bearer " + "T" * 20}).status, 200)


class CsrfTest(ConsoleCase):
    def setUp(self) -> None:
        super().setUp()
        self.asking: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._ask)
        self.thread.start()
        self.request = wait_for_request(self.records)

    def _ask(self) -> None:
        try:
            self.asking["result"] = Inbox(self.records, timeout=30).ask("write_note", {"text": "x"})
        except Exception as exc:  # noqa: BLE001 - the test reads it
            self.asking["result"] = exc

    def tearDown(self) -> None:
        if self.thread.is_alive():  # answer it, so the thread ends
            self.post("/inbox/decide", {"csrf": self.console.csrf, "id": self.request.id, "decision": "deny:once"})
        self.thread.join(10)
        super().tearDown()

    def still_waiting(self) -> None:
        self.assertEqual(sorted(os.listdir(inbox_folder(self.records))), [self.request.id + ".request.json"])

    def test_every_post_needs_the_csrf_token_a_form_and_this_origin(self) -> None:
        fields = {"id": self.request.id, "decision": "approve:once"}
        cases = [
            ("no token", fields, FORM, 403, "the form carries no valid CSRF token"),
            ("a wrong token", {**fields, "csrf": "x" * 43}, FORM, 403, "the form carries no valid CSRF token"),
            ("another origin", {**fields, "csrf": self.console.csrf}, {**FORM, "Origin": "http://evil.example"}, 403,
             "the form came from another site"),
            ("an opaque origin", {**fields, "csrf": self.console.csrf}, {**FORM, "Origin": "null"}, 403,
             "the form came from another site"),
            ("not a form", {**fields, "csrf": self.console.csrf}, {**HOST, "Content-Type": "application/json"}, 400,
             "expected a form"),
        ]
        for label, form, headers, status, message in cases:
            with self.subTest(label):
                response = self.post("/inbox/decide", form, headers)
                self.assertEqual(response.status, status)
                self.assertIn(message, response.body.decode())
                self.still_waiting()
        for body in (b"\xff\xfe", b"csrf"):  # not UTF-8; not key=value
            with self.subTest(body=body):
                response = self.console.handle("POST", "/inbox/decide", FORM, body)
                self.assertEqual((response.status, b"the form could not be read" in response.body), (400, True))
                self.still_waiting()

    def test_no_get_changes_anything(self) -> None:
        query = urlencode({"csrf": self.console.csrf, "id": self.request.id, "decision": "approve:always",
                           "file": "x", "path": self.request.path})
        for path in ("/", "/session", "/inbox", "/approvals", "/api/version", "/console.js", "/inbox/decide",
                     "/approvals/revoke"):
            with self.subTest(path=path):
                self.assertIn(self.get(f"{path}?{query}").status, (200, 404))
                self.still_waiting()
        self.assertEqual(self.console.handle("PUT", "/inbox/decide", HOST).status, 405)
        self.still_waiting()

    def test_a_decision_from_the_page_reaches_the_waiting_call(self) -> None:
        page = self.page("/inbox")
        self.assertIn(f'data-id="{self.request.id}"', page)
        self.assertIn(f'name="csrf" value="{self.console.csrf}"', page)
        response = self.post("/inbox/decide", {"csrf": self.console.csrf, "id": self.request.id,
                                               "decision": "approve:session"}, {**FORM, "Origin": "http://127.0.0.1:8470"})
        self.thread.join(10)
        self.assertEqual(self.asking["result"], Decided(Remember("session"), "alice"))
        self.assertIn(f"approved session: {self.request.id} (as alice)", self.follow(response))
        # the same id again: stale, and said so
        again = self.post("/inbox/decide", {"csrf": self.console.csrf, "id": self.request.id, "decision": "deny:once"})
        self.assertIn(f"no call waits as {self.request.id} any more (answered, timed out or gone): nothing was "
                      "decided", self.follow(again))
        self.assertIn("No call is waiting for a person.", self.page("/inbox"))


class ReceiptTest(ConsoleCase):
    """A guard whose writes run only with an approval receipt (HMAC approvers here: tests/test_console_inbox.py
    signs with real OpenSSH keys): the console's approval is a receipt it signs, the record carries it."""

    def setUp(self) -> None:
        super().setUp()
        self.receipts = os.path.join(self.tmp, "receipts")
        os.makedirs(self.receipts)
        self.policy = os.path.join(self.tmp, "policy.json")
        with open(self.policy, "w", encoding="utf-8") as handle:
            json.dump({"agent": "notes", "allowed_tools": ["write_note"], "write_tools": ["write_note"]}, handle)
        self.path = os.path.join(self.records, "s.jsonl")
        self.written: list[str] = []
        self.result: dict[str, Any] = {}

    def start(self, text: str) -> threading.Thread:
        """A gate of its own over the record calls write_note(text) on a thread; it waits in the inbox."""
        inbox = Inbox(self.records, timeout=30, session=self.path)
        receipts = Receipts(self.receipts, Keys(hmac_keys=(ALICE,)), policy_digest(self.policy),
                            os.path.abspath(self.path), inbox=inbox)

        def call() -> None:
            with SessionRecorder.open(self.path) as recorder:
                gate = Gate({"write_note": lambda text: self.written.append(text) or {"ok": True}},
                            load_policy(self.policy), recorder=recorder, receipts=receipts)
                self.result = gate.call("write_note", {"text": text})

        thread = threading.Thread(target=call)
        thread.start()
        self.addCleanup(thread.join, 30)
        return thread

    def metas(self) -> list[dict[str, Any]]:
        with open(self.path, encoding="utf-8") as handle:
            return [json.loads(line)["meta"] for line in handle]

    def test_an_approval_signs_the_receipt_the_call_runs_with(self) -> None:
        self.console = Console([self.records], person="alice@example.com", audit=False, signer=ALICE)
        thread = self.start("hi")
        request = wait_for_request(self.records)
        name = call_digest("write_note", {"text": "hi"})[:16]
        self.assertEqual(request.receipt, os.path.join(self.receipts, name + ".request"))
        self.assertIn("runs only with an approval receipt: approving signs one with this console's key, as "
                      "alice@example.com", self.page("/inbox"))
        done = self.post("/inbox/decide", {"csrf": self.console.csrf, "id": request.id, "decision": "approve:once"})
        thread.join(30)
        self.assertIn(f"approved once: {request.id} (as alice@example.com)", self.follow(done))
        self.assertEqual((self.result, self.written), ({"ok": True}, ["hi"]))
        [meta] = self.metas()
        receipt = parse_receipt(meta["x-receipt"].encode(), "x-receipt")
        self.assertEqual((meta["outcome"], meta["x-decided-by"], "x-confirmed" in meta, receipt.scope),
                         ("ran", "alice@example.com", False, "once"))
        with open(os.path.join(self.receipts, name + ".receipt"), encoding="utf-8") as handle:
            self.assertEqual(handle.read(), meta["x-receipt"])  # the receipt the console wrote, whole
        with open(self.path, "rb") as handle:
            report = verify_receipts(read_session(handle, self.path), Keys(hmac_keys=(ALICE,)),
                                     policy_digest(self.policy), frozenset({"write_note"}))
        self.assertEqual((report.verified, report.receipted), (True, 1))
        self.assertIn("with an approval receipt", self.page("/session?" + urlencode({"path": self.path})))

    def test_a_denial_signs_nothing(self) -> None:
        self.console = Console([self.records], person="alice@example.com", audit=False, signer=ALICE)
        thread = self.start("no")
        request = wait_for_request(self.records)
        self.post("/inbox/decide", {"csrf": self.console.csrf, "id": request.id, "decision": "deny:once"})
        thread.join(30)
        self.assertEqual((self.result, self.written), ({"ok": False, "error": "confirmation declined"}, []))
        self.assertEqual([name[-8:] for name in os.listdir(self.receipts)], [".request"])
        [meta] = self.metas()
        self.assertEqual((meta["outcome"], meta["x-decided-by"]), ("refused", "alice@example.com"))

    def test_a_console_without_a_key_cannot_approve_and_says_so(self) -> None:
        thread = self.start("hi")
        request = wait_for_request(self.records)
        page = self.page("/inbox")
        self.assertIn("runs only with an approval receipt signed by an approver: this console has no key, so it can "
                      "only deny it here", page)
        self.assertNotIn('value="approve:once"', page)
        refused = self.post("/inbox/decide", {"csrf": self.console.csrf, "id": request.id, "decision": "approve:once"})
        self.assertIn(f"the call {request.id} runs only with an approval receipt signed by an approver, and this "
                      "console has no key to sign one (toolreplay serve --ssh-key KEY): nothing was decided",
                      self.follow(refused))
        self.assertEqual(sorted(os.listdir(inbox_folder(self.records))), [request.id + ".request.json"])
        self.post("/inbox/decide", {"csrf": self.console.csrf, "id": request.id, "decision": "deny:once"})
        thread.join(30)  # it can still deny
        self.assertEqual((self.result, self.written), ({"ok": False, "error": "confirmation declined"}, []))

    def test_a_receipt_request_for_another_call_is_not_signed(self) -> None:
        self.console = Console([self.records], person="alice@example.com", audit=False, signer=ALICE)
        thread = self.start("hi")
        request = wait_for_request(self.records)
        assert request.receipt is not None
        with open(request.receipt, "rb") as handle:
            original = handle.read()
        other = json.loads(original)  # a well-formed request, for another call
        other["args"] = {"text": "something else"}
        other["call"] = call_digest("write_note", other["args"])
        with open(request.receipt, "w", encoding="utf-8") as handle:
            json.dump(other, handle)
        refused = self.post("/inbox/decide", {"csrf": self.console.csrf, "id": request.id, "decision": "approve:once"})
        self.assertIn(f"the receipt request of {request.id} is for another call than the one shown: nothing was "
                      "decided", self.follow(refused))
        self.assertEqual([name[-8:] for name in os.listdir(self.receipts)], [".request"])  # nothing signed
        self.post("/inbox/decide", {"csrf": self.console.csrf, "id": request.id, "decision": "deny:once"})
        thread.join(30)
        self.assertEqual(self.written, [])

    def test_an_approval_without_its_receipt_runs_nothing(self) -> None:
        # a program that writes an approve decision file, and no receipt: the call stays refused
        thread = self.start("hi")
        request = wait_for_request(self.records)
        decide(self.records, request.id, "approve", "once", "mallory")
        thread.join(30)
        name = call_digest("write_note", {"text": "hi"})[:16]
        self.assertEqual(self.result, {"ok": False, "error": "confirmation required: no approval receipt for this "
                                       f"call yet; approve {name}.request of the receipts folder (toolreplay approve)"})
        self.assertEqual(self.written, [])
        [meta] = self.metas()
        self.assertEqual((meta["outcome"], meta["x-decided-by"]), ("refused", "mallory"))


class PagesTest(ConsoleCase):
    def test_hostile_strings_are_text(self) -> None:
        hostile = {"q": '<img src="http://evil.example/x">', "k": "\u202eevil"}
        self.write("evil.jsonl", record_line(0, EVIL, hostile, {"r": EVIL}, {"ts": "2026-12-01T10:00:00Z",
                                                                              "outcome": "ran"}))
        listing = self.page("/")
        self.assertNotIn(EVIL, listing)
        self.assertIn("evil.jsonl", listing)
        self.assertEqual(listing.count("<script"), 1)  # the console's own, with src
        self.assertIn('<script src="/console.js"></script>', listing)
        session = self.page("/session?" + urlencode({"path": os.path.join(self.records, "evil.jsonl")}))
        self.assertNotIn(EVIL, session)
        self.assertNotIn("<img", session)
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt;", session)
        self.assertNotIn("\u202e", session)
        # the same in the inbox
        asking = Inbox(self.records, timeout=30)
        answers: list[Decided] = []
        thread = threading.Thread(target=lambda: answers.append(asking.ask(EVIL, hostile)))
        thread.start()
        request = wait_for_request(self.records)
        inbox = self.page("/inbox")
        self.post("/inbox/decide", {"csrf": self.console.csrf, "id": request.id, "decision": "deny:once"})
        self.assertNotIn(EVIL, inbox)
        self.assertNotIn("<img", inbox)
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt;", inbox)
        thread.join(10)
        self.assertEqual(answers, [Decided(False, "alice")])

    def test_unknown_things_are_a_message_and_the_console_goes_on(self) -> None:
        cases = [("/nowhere", 404, "nothing is served at /nowhere"),
                 ("/session?path=/etc/passwd", 404, "the console lists no session file at that path"),
                 ("/?since=yesterday", 200, "since &#x27;yesterday&#x27;: expected 30m, 1h, 7d or a date"),
                 ("/?page=99999999999&kind=nonsense", 200, "no session matches")]
        for target, status, message in cases:
            with self.subTest(target=target):
                response = self.get(target)
                self.assertEqual(response.status, status)
                self.assertIn(message, response.body.decode())

    def test_torn_and_unreadable_records(self) -> None:
        good = record_line(0, "read_note", {}, {"ok": True}, {"ts": "2026-12-01T10:00:00Z", "outcome": "ran"})
        self.write("torn.jsonl", good + good.replace('"index": 0', '"index": 1')[:30])
        self.write("bad.jsonl", good + "{not json\n" + good)
        listing = self.page("/")
        self.assertIn("bad.jsonl:2: Expecting property name enclosed in double quotes", listing)
        row = self.console.index.find(os.path.join(self.records, "torn.jsonl"))
        assert row is not None
        self.assertEqual((row.calls, row.error), (1, None))  # the torn line waits for its end
        self.write("torn.jsonl", good.replace('"index": 0', '"index": 1')[30:], "a")
        self.page("/")
        self.assertEqual(row.calls, 2)

    def test_a_folder_that_disappears(self) -> None:
        self.write("a.jsonl", record_line(0, "read_note", {}, {"ok": True}))
        self.assertIn("a.jsonl", self.page("/"))
        shutil.rmtree(self.records)
        listing = self.page("/")
        self.assertIn(f"{self.records}: cannot read: No such file or directory", listing)
        self.assertNotIn("a.jsonl", listing)
        self.assertIn("No call is waiting", self.page("/inbox"))

    def test_revoking_a_remembered_approval(self) -> None:
        path = os.path.join(self.records, "approvals.jsonl")  # in the records folder: not listed as a session
        approvals = Approvals(path)
        approval_id = approvals.remember("write_note", {"text": EVIL}, "always")
        self.console = Console([self.records], approvals=[path], audit=False)
        page = self.page("/approvals")
        self.assertIn(f'name="id" value="{approval_id}"', page)
        self.assertNotIn(EVIL, page)
        self.assertEqual(self.console.index.rows(), [])
        wrong = self.post("/approvals/revoke", {"csrf": self.console.csrf, "file": "/etc/passwd", "id": "x"})
        self.assertIn("that approvals file is not one this console shows", self.follow(wrong))
        done = self.post("/approvals/revoke", {"csrf": self.console.csrf, "file": path, "id": str(approval_id)})
        self.assertIn(f"revoked {approval_id} write_note args", self.follow(done))
        self.assertEqual(read_approvals(path), [])
        again = self.post("/approvals/revoke", {"csrf": self.console.csrf, "file": path, "id": str(approval_id)})
        self.assertIn(f"no approval {approval_id} in {path}", self.follow(again))


class IndexTest(ConsoleCase):
    def test_counts_by_kind_from_a_guarded_record(self) -> None:
        path = os.path.join(self.records, "guarded.jsonl")
        recorder = SessionRecorder.open(path)
        answers = iter([Decided(True, "alice"), Decided(False, "bob")])
        gate = Gate({"write_note": lambda text: {"ok": True}, "read_note": lambda: {"text": "n"}}, POLICY,
                    confirm=lambda tool, args: next(answers), recorder=recorder)
        gate.call("read_note", {})
        gate.call("write_note", {"text": "yes"})
        gate.call("write_note", {"text": "no"})
        gate.call("delete_all", {})
        recorder.close()
        index = SessionIndex([self.records], audit=True)
        index.refresh()
        index.audit_pending()
        [row] = index.rows()
        self.assertEqual(row.counts, {"ran": 2, "blocked": 2, "approved": 1, "unknown": 0, "findings": 0})
        self.assertEqual(row.tools, {"read_note", "write_note", "delete_all"})
        session = self.page("/session?" + urlencode({"path": path}))
        self.assertIn("<td>approved</td><td>decided by alice</td>", session)
        self.assertIn("<td>blocked</td><td>confirmation declined; decided by bob</td>", session)
        self.assertIn("<td>blocked</td><td>tool not allowed: delete_all</td>", session)

    def test_filters_and_pages(self) -> None:
        for number in range(120):
            meta = {"ts": f"2026-12-01T10:{number // 60:02d}:{number % 60:02d}Z",
                    "outcome": "refused" if number % 3 == 0 else "ran"}
            response = {"ok": False, "error": "denied by rule no-rm: not here"} if number % 3 == 0 else {"ok": True}
            self.write(f"s{number:03d}.jsonl", record_line(0, "rm" if number % 3 == 0 else "ls", {}, response, meta))
        index = SessionIndex([self.records], audit=False)
        index.refresh()
        rows = index.rows()
        self.assertEqual([row.name for row in rows[:2]], ["records/s119.jsonl", "records/s118.jsonl"])
        page, total = select(rows, Filters(kind="blocked"), 0, 50)
        self.assertEqual((total, len(page), page[0].name), (40, 40, "records/s117.jsonl"))
        self.assertEqual(select(rows, Filters(rule="no-rm"), 0, 50)[1], 40)
        self.assertEqual(select(rows, Filters(tool="ls"), 50, 50)[0][0].name, "records/s044.jsonl")  # the 51st of 119, 118, 116, 115, ...
        since = parse_since("2026-12-01T10:01:50Z", 0)
        self.assertEqual(select(rows, Filters(since=since), 0, 50)[1], 10)
        listing = self.page("/?kind=blocked&page=0")
        self.assertIn("40 sessions match · page 1 of 1", listing)
        older = self.page("/?page=1")
        self.assertIn("page 2 of 3", older)
        self.assertIn('href="/">newer</a>', older)
        self.assertIn('href="/?page=2">older</a>', older)
        self.assertEqual(parse_qs(urlsplit("/?page=2").query), {"page": ["2"]})

    def test_the_version_changes_with_a_new_call(self) -> None:
        self.write("a.jsonl", record_line(0, "ls", {}, {"ok": True}))
        before = json.loads(self.get("/api/version").body)["version"]
        self.assertEqual(json.loads(self.get("/api/version").body)["version"], before)
        self.write("a.jsonl", record_line(1, "ls", {}, {"ok": True}), "a")
        self.assertNotEqual(json.loads(self.get("/api/version").body)["version"], before)


class HistoryTest(ConsoleCase):
    def test_the_sessions_of_a_fleet_history_are_listed(self) -> None:
        self.write("a.jsonl", record_line(0, "ls", {}, {"ok": True}) + record_line(1, "ls", {}, {"ok": True}))
        database = os.path.join(self.tmp, "fleet.db")
        self.assertEqual(main(["audit", self.records, "--format", "sqlite", "-o", database], IO.memory()), 1)
        shutil.rmtree(self.records)
        os.makedirs(self.records)
        self.console = Console([self.records], database=database, audit=False)
        [row] = self.console.index.rows()
        self.assertEqual((row.name, row.calls, row.counts["findings"], row.history, row.tools),
                         (os.path.join(self.tmp, "records", "a.jsonl"), 2, 1, True, {"ls"}))
        listing = self.page("/")
        self.assertIn("<td>history</td>", listing)
        self.assertIn("1 session indexed", listing)


class CommandTest(unittest.TestCase):
    def test_usage_errors(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            token = os.path.join(folder, "token")
            with open(token, "w") as handle:
                handle.write("short\n")
            cases = [
                (["serve", os.path.join(folder, "missing")], f"error: {folder}/missing: not a folder (serve takes "
                 "records folders)\n"),
                (["serve", folder, "--listen", "0.0.0.0:0"], "error: --listen 0.0.0.0: not a loopback address; "
                 "serving other machines needs --public and --token-file\n"),
                (["serve", folder, "--listen", "0.0.0.0:0", "--public"], "error: --public needs --token-file FILE "
                 "(a token every request must carry)\n"),
                (["serve", folder, "--token-file", token], f"error: --token-file {token}: the token must be at "
                 "least 16 letters and digits\n"),
                (["serve", folder, "--listen", "localhost:http"], "error: --listen localhost:http: expected PORT or "
                 "HOST:PORT\n"),
                (["serve", folder, "--ssh-key", token, "--person", "Ada Lovelace"], "error: --person (the name the "
                 "receipts are signed as) 'Ada Lovelace' must be non-empty, without spaces, '+' or control characters\n"),
                (["serve", folder, "--ssh-key", folder + "/missing", "--person", "ada"], f"error: --ssh-key {folder}"
                 "/missing: not a file (an OpenSSH private key)\n"),
                (["serve", folder, "--ssh-key", token, "--receipt-expires", "tomorrow"], "error: --receipt-expires "
                 "tomorrow: expected a duration (30m, 8h, 7d)\n"),
                (["serve", folder, "--receipt-expires", "8h"], "error: --receipt-expires needs --ssh-key KEY\n"),
            ]
            for argv, message in cases:
                with self.subTest(argv=argv):
                    self.assertEqual(run(*argv), (2, "", message))


if __name__ == "__main__":
    unittest.main()
