"""The console deciding for real front ends, end to end: `toolreplay serve` in its own process answers a call
that waits in the inbox of `toolreplay mcp-proxy --listen --inbox`, asked by the MCP Python SDK's Streamable
HTTP client (which declares no elicitation, so it cannot ask a person itself). The decision is POSTed as the
page's form posts it, with its CSRF token and this console's Origin. With approvers (`--approvers
--receipts`), the console's approval is an approval receipt it signs with a real OpenSSH key (`serve
--ssh-key`), which `verify --approvers --policy` checks offline.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from tests.support import require
from tests.test_cli import run
from tests.test_mcp_http_listen import ROOT, ListenerCase, session_run
from tests.test_mcp_real import texts
from tests.test_receipts import SSH_KEYGEN, _keygen
from toolreplay.audit.receipts import call_digest, parse_receipt
from toolreplay.guard.inbox import Request, pending_requests

INTEGRATION_TIER = True


class ConsoleProcess:
    """`toolreplay serve FOLDER --listen 127.0.0.1:0 ...` in a process; `stop` ends it with SIGINT (Ctrl-C)."""

    def __init__(self, folder: str, *extra: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "toolreplay", "serve", folder, "--listen", "127.0.0.1:0", *extra],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert self.process.stderr is not None
        ready, _, _ = select.select([self.process.stderr], [], [], 60)
        self.first = self.process.stderr.readline().decode() if ready else ""
        found = re.match(r"toolreplay console at (http://127\.0\.0\.1:\d+)/ ", self.first)
        if found is None:
            self.stop()
            raise AssertionError(f"the console did not start: {self.first!r}")
        self.url = found.group(1)

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            return str(response.read().decode("utf-8"))

    def decide(self, request_id: str, decision: str) -> str:
        """POST the inbox form as the page does (its CSRF token, this console's Origin); the page it leads to."""
        page = self.get("/inbox")
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        if found is None:
            raise AssertionError("the inbox page has no form: " + page[-500:])
        form = urllib.parse.urlencode({"csrf": found.group(1), "id": request_id, "decision": decision}).encode()
        request = urllib.request.Request(self.url + "/inbox/decide", data=form, method="POST", headers={
            "Content-Type": "application/x-www-form-urlencoded", "Origin": self.url})
        with urllib.request.urlopen(request, timeout=30) as response:  # follows the 303 to the inbox page
            return str(response.read().decode("utf-8"))

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        assert self.process.stderr is not None
        self.process.stderr.close()
        return code


def waiting_request(records: str, timeout: float = 30.0) -> Request:
    """The call waiting in the records folder's inbox (fails the test when none comes)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for item in pending_requests(records):
            if isinstance(item, Request):
                return item
        time.sleep(0.02)
    raise AssertionError("no call came into the inbox")


class McpHttpInboxTest(ListenerCase):
    """An SDK client without elicitation, a listener with `--inbox`, the console deciding."""

    def setUp(self) -> None:
        super().setUp()  # the listener has made its records folder: the inbox is in it
        self.console = ConsoleProcess(self.records, "--person", "Ada Console")
        self.addCleanup(self.console.stop)

    def start(self, *extra: str) -> Any:
        return super().start("--inbox", os.path.join(self.directory, "records"), "--inbox-timeout", "60", *extra)

    def call_decided(self, text: str, decision: str) -> tuple[Any, Request, str]:
        """Call write_note through the listener; when the call waits in the inbox, decide it from the console."""
        async def scenario(session: Any) -> Any:
            return texts(await session.call_tool("write_note", {"text": text}))

        async def both() -> tuple[Any, Request, str]:
            call = asyncio.ensure_future(session_run(self.listener.url, scenario))
            request = await asyncio.to_thread(waiting_request, self.records)
            page = await asyncio.to_thread(self.console.get, "/inbox")
            self.assertIn(f'data-id="{request.id}"', page)  # the page shows it
            decided = await asyncio.to_thread(self.console.decide, request.id, decision)
            return await call, request, decided

        return asyncio.run(both())

    def metas(self) -> list[dict[str, Any]]:
        [record] = self.record_files()
        with open(record, encoding="utf-8") as lines:
            return [json.loads(line)["meta"] for line in lines]

    def test_an_approval_from_the_console_runs_the_call_and_the_record_names_it(self) -> None:
        result, request, page = self.call_decided("yes", "approve:once")
        self.assertEqual(result, (False, ['write_note {"text": "yes"}']))
        self.assertEqual((request.tool, request.args, request.front_end), ("write_note", {"text": "yes"}, "mcp-proxy"))
        [record] = self.record_files()
        self.assertEqual(request.session, record)
        self.assertIn(f"approved once: {request.id} (as Ada Console)", page)
        with open(self.notes, encoding="utf-8") as notes:
            self.assertEqual(notes.read(), '{"text": "yes"}\n')
        [meta] = self.metas()
        self.assertEqual((meta["outcome"], meta["x-decided-by"], meta["x-confirmed"]), ("ran", "Ada Console", "once"))
        self.assertEqual(run("verify", record), (0, "chain: intact\n", ""))
        self.assertEqual(list(pending_requests(self.records)), [])

    def test_a_denial_from_the_console_refuses_the_call_and_the_record_names_it(self) -> None:
        result, request, page = self.call_decided("no", "deny:once")
        self.assertEqual(result, (True, ["toolreplay: confirmation declined"]))
        self.assertIn(f"denied: {request.id} (as Ada Console)", page)
        self.assertFalse(os.path.exists(self.notes))
        [meta] = self.metas()
        self.assertEqual((meta["outcome"], meta["x-decided-by"], "x-confirmed" in meta), ("refused", "Ada Console", False))
        self.assertEqual(os.listdir(os.path.join(self.records, ".toolreplay-inbox")), [])


class McpHttpReceiptTest(McpHttpInboxTest):
    """The listener's writes run only with an approval receipt: the console signs it with alice's OpenSSH key."""

    @classmethod
    def setUpClass(cls) -> None:
        if SSH_KEYGEN is None:
            return
        cls.keys = tempfile.TemporaryDirectory()
        cls.alice_key = os.path.join(cls.keys.name, "alice")
        cls.alice_pub = _keygen(cls.alice_key)

    @classmethod
    def tearDownClass(cls) -> None:
        if SSH_KEYGEN is not None:
            cls.keys.cleanup()

    def setUp(self) -> None:
        require(SSH_KEYGEN is not None, "ssh-keygen (OpenSSH) is not installed")
        super().setUp()

    def start(self, *extra: str) -> Any:
        self.approvers = os.path.join(self.directory, "approvers")
        with open(self.approvers, "w", encoding="utf-8") as out:
            out.write(f"alice@example.com {self.alice_pub}\n")
        self.receipts = os.path.join(self.directory, "receipts")
        os.makedirs(self.receipts, exist_ok=True)
        return super().start("--approvers", self.approvers, "--receipts", self.receipts, *extra)

    def open_console(self, *extra: str) -> ConsoleProcess:
        console = ConsoleProcess(self.records, "--person", "alice@example.com", *extra)
        self.addCleanup(console.stop)
        return console

    def test_an_approval_from_the_console_runs_the_call_and_the_record_names_it(self) -> None:
        self.console = self.open_console("--ssh-key", self.alice_key)
        result, request, page = self.call_decided("yes", "approve:once")
        self.assertEqual(result, (False, ['write_note {"text": "yes"}']))
        name = call_digest("write_note", {"text": "yes"})[:16]
        self.assertEqual(request.receipt, os.path.join(self.receipts, name + ".request"))
        self.assertIn(f"approved once: {request.id} (as alice@example.com)", page)
        [meta] = self.metas()
        receipt = parse_receipt(meta["x-receipt"].encode(), "x-receipt")
        self.assertEqual((meta["outcome"], meta["x-decided-by"], receipt.scope, [line.name for line in receipt.signatures]),
                         ("ran", "alice@example.com", "once", ["alice@example.com"]))
        [record] = self.record_files()
        self.assertEqual(run("verify", record, "--approvers", self.approvers, "--policy", self.policy),
                         (0, "chain: intact\napprovals: verified\napproved by: alice@example.com\n"
                             "writes: 1 of 1 carry a receipt that holds\n", ""))

    def test_a_denial_from_the_console_refuses_the_call_and_the_record_names_it(self) -> None:
        self.console = self.open_console("--ssh-key", self.alice_key)
        result, request, page = self.call_decided("no", "deny:once")
        self.assertEqual(result, (True, ["toolreplay: confirmation declined"]))
        self.assertFalse(os.path.exists(self.notes))
        self.assertEqual([name[-8:] for name in os.listdir(self.receipts)], [".request"])  # nothing signed
        [meta] = self.metas()
        self.assertEqual((meta["outcome"], meta["x-decided-by"]), ("refused", "alice@example.com"))

    def test_a_console_without_the_key_cannot_approve(self) -> None:
        keyless = self.open_console()

        async def scenario(session: Any) -> Any:
            return texts(await session.call_tool("write_note", {"text": "x"}))

        async def both() -> tuple[Any, str, str]:
            call = asyncio.ensure_future(session_run(self.listener.url, scenario))
            request = await asyncio.to_thread(waiting_request, self.records)
            refused = await asyncio.to_thread(keyless.decide, request.id, "approve:once")
            denied = await asyncio.to_thread(keyless.decide, request.id, "deny:once")
            return await call, refused, denied

        result, refused, denied = asyncio.run(both())
        self.assertIn("runs only with an approval receipt signed by an approver, and this console has no key to sign "
                      "one (toolreplay serve --ssh-key KEY): nothing was decided", refused)
        self.assertIn("this console has no key, so it can only deny it here", refused)
        self.assertIn("denied: ", denied)
        self.assertEqual(result, (True, ["toolreplay: confirmation declined"]))
        self.assertFalse(os.path.exists(self.notes))

    def test_a_key_that_cannot_sign_is_said_at_start(self) -> None:
        code, out, err = run("serve", self.records, "--ssh-key", self.approvers, "--person", "alice@example.com")
        self.assertEqual((code, out), (2, ""))
        self.assertTrue(err.startswith(f"error: ssh-keygen could not sign with {self.approvers}: "), err)
