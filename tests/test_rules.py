"""Policy rules: every kind of rule at run time (the Gate) and offline (`scope` over the Gate's record)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import unittest
from typing import Any

from toolreplay.audit.render import scope_text
from toolreplay.audit.scope import audit_rule_facts, rule_fact_extractor
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.errors import InputError
from toolreplay.format.chunks import read_facts
from toolreplay.format.strictjson import read_json_file
from toolreplay.guard.gate import Gate
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.matchers import MatchError, path_segments, resolve_path, url_host
from toolreplay.policy.model import load_policy, parse_policy
from toolreplay.policy.regexbound import compile_bounded
from toolreplay.policy.rules import RuleSet, RuleState

TOOLS = ["write_file", "run_command", "check_code", "fetch", "set_status", "set_flag", "refund", "send_email",
         "get_order", "cancel_order", "search", "echo", "read_file", "open_url", "ping", "poll"]

POLICY: dict[str, Any] = {
    "agent": "rules-test",
    "allowed_tools": TOOLS,
    "write_tools": ["refund"],
    "root": "/abs",
    "rules": [
        {"id": "docs-only", "tools": ["write_file"], "effect": "deny", "reason": "writes stay under docs/",
         "unless": [{"arg": "path", "under": ["docs"]}]},
        {"id": "git-read", "tools": ["run_command"], "effect": "deny", "reason": "only git status and git diff",
         "unless": [{"arg": "cmd", "glob": ["git status", "git diff*"]}]},
        {"id": "code-form", "tools": ["check_code"], "effect": "deny", "reason": "a code is six capitals",
         "unless": [{"arg": "code", "regex": "[A-Z]{6}"}]},
        {"id": "api-only", "tools": ["fetch"], "effect": "deny", "reason": "fetch only from api.example.com",
         "unless": [{"arg": "url", "host": ["api.example.com", "*.cdn.example.org", "bücher.example",
                                            "xn--mnchen-3ya.example"]}]},
        {"id": "no-secrets", "tools": ["read_file"], "effect": "deny", "reason": "never the secrets folder",
         "when": [{"arg": "path", "under": ["secrets"]}]},
        {"id": "no-loopback", "tools": ["open_url"], "effect": "deny", "reason": "never this machine",
         "when": [{"arg": "url", "host": ["127.0.0.1", "[::1]", "localhost"]}]},
        {"id": "status-values", "tools": ["set_status"], "effect": "deny", "reason": "status is open or closed",
         "unless": [{"arg": "status", "in": ["open", "closed"]}]},
        {"id": "flag-value", "tools": ["set_flag"], "effect": "deny", "reason": "the flag is 1000",
         "unless": [{"arg": ["flag", "value"], "eq": 1000}]},
        {"id": "refund-cap", "tools": ["refund"], "effect": "deny", "reason": "no refund above 1,000",
         "when": [{"arg": "amount", "gt": 1000}]},
        {"id": "refund-review", "tools": ["refund"], "effect": "ask", "reason": "a person checks refunds above 100",
         "when": [{"arg": "amount", "gt": 100}]},
        {"id": "refund-small", "tools": ["refund"], "effect": "allow", "reason": "small refunds need no person",
         "when": [{"arg": "amount", "le": 100}]},
        {"id": "short-mail", "tools": ["send_email"], "effect": "deny", "reason": "a body of at most 5,000 characters",
         "unless": [{"arg": "body", "max_length": 5000}]},
        {"id": "look-first", "tools": ["cancel_order"], "effect": "deny", "reason": "get_order of that order first",
         "unless": [{"after": "get_order", "same": ["order_id"]}]},
        {"id": "search-budget", "tools": ["search"], "effect": "deny", "reason": "at most 2 searches",
         "unless": [{"count": "search", "max": 2}]},
        {"id": "session-budget", "tools": ["*"], "effect": "deny", "reason": "at most 12 calls a session",
         "unless": [{"count": "*", "max": 12}]},
        {"id": "pace", "tools": ["*"], "effect": "deny", "reason": "at most 3 calls in 10 seconds",
         "unless": [{"rate": "*", "max": 3, "seconds": 10}]},
        {"id": "no-loop", "tools": ["ping"], "effect": "deny", "reason": "the same ping at most 3 times",
         "unless": [{"identical": "ping", "max": 3}]},
        {"id": "no-burst", "tools": ["poll"], "effect": "deny", "reason": "the same poll at most twice in 250 s",
         "unless": [{"identical": "*", "max": 2, "seconds": 250}]},
        {"id": "watch-echo", "tools": ["echo"], "effect": "deny", "shadow": True, "reason": "13 is unlucky",
         "when": [{"arg": "v", "eq": 13}]},
        {"id": "watch-loop", "tools": ["*"], "effect": "ask", "shadow": True, "reason": "a loop?",
         "unless": [{"identical": "*", "max": 1}]},
    ],
}

RUN = "run"
E = "rule error: "

# (case, earlier calls, the call, expected): expected is "run", or (effect, rule id, reason).
CASES: list[tuple[str, list[tuple[str, dict[str, Any]]], tuple[str, dict[str, Any]], Any]] = [
    ("under: inside", [], ("write_file", {"path": "docs/intro.md"}), RUN),
    ("under: dots normalised", [], ("write_file", {"path": "docs/./a/../b.md"}), RUN),
    ("under: the folder itself", [], ("write_file", {"path": "docs/"}), RUN),
    ("under: .. escapes", [], ("write_file", {"path": "docs/../etc/passwd"}),
     ("deny", "docs-only", "writes stay under docs/")),
    ("under: prefix is not a folder", [], ("write_file", {"path": "docs-private/x"}),
     ("deny", "docs-only", "writes stay under docs/")),
    ("under: absolute outside the root", [], ("write_file", {"path": "/docs/x"}),
     ("deny", "docs-only", E + 'argument "path" is an absolute path outside the policy\'s root')),
    ("under: absolute inside the root", [], ("write_file", {"path": "/abs/docs/x"}), RUN),
    ("under: backslash escape", [], ("write_file", {"path": "docs\\..\\..\\x"}),
     ("deny", "docs-only", E + 'argument "path" holds a backslash, which a path rule reads neither as a separator '
                               'nor as a name')),
    ("under never: relative", [], ("read_file", {"path": "secrets/key"}), ("deny", "no-secrets", "never the secrets folder")),
    ("under never: dots", [], ("read_file", {"path": "./public/../secrets//key"}),
     ("deny", "no-secrets", "never the secrets folder")),
    ("under never: absolute in the root", [], ("read_file", {"path": "/abs/secrets/key"}),
     ("deny", "no-secrets", "never the secrets folder")),
    ("under never: absolute with dots", [], ("read_file", {"path": "/abs/public/../secrets/key"}),
     ("deny", "no-secrets", "never the secrets folder")),
    ("under never: climbs above", [], ("read_file", {"path": "../x/secrets/key"}),
     ("deny", "no-secrets", E + 'argument "path" climbs above its start with ".."')),
    ("under never: absolute outside the root", [], ("read_file", {"path": "/etc/secrets/key"}),
     ("deny", "no-secrets", E + 'argument "path" is an absolute path outside the policy\'s root')),
    ("under never: backslash", [], ("read_file", {"path": "secrets\\key"}),
     ("deny", "no-secrets", E + 'argument "path" holds a backslash, which a path rule reads neither as a separator '
                                'nor as a name')),
    ("under never: home", [], ("read_file", {"path": "~/secrets/key"}),
     ("deny", "no-secrets", E + 'argument "path" starts with ~ (a home folder, which a path rule cannot resolve)')),
    ("under never: other folder", [], ("read_file", {"path": "/abs/public/secrets"}), RUN),
    ("under never: case differs (a limit, see docs)", [], ("read_file", {"path": "Secrets/key"}), RUN),
    ("under: wrong type", [], ("write_file", {"path": ["docs"]}),
     ("deny", "docs-only", E + 'argument "path" is an array, not a string')),
    ("under: missing", [], ("write_file", {}), ("deny", "docs-only", E + 'argument "path" is missing')),
    ("glob: exact", [], ("run_command", {"cmd": "git status"}), RUN),
    ("glob: star", [], ("run_command", {"cmd": "git diff --stat"}), RUN),
    ("glob: whole string", [], ("run_command", {"cmd": "git status; rm -rf /"}),
     ("deny", "git-read", "only git status and git diff")),
    ("glob: other", [], ("run_command", {"cmd": "git push"}), ("deny", "git-read", "only git status and git diff")),
    ("regex: full match", [], ("check_code", {"code": "ABCDEF"}), RUN),
    ("regex: longer fails", [], ("check_code", {"code": "ABCDEFG"}), ("deny", "code-form", "a code is six capitals")),
    ("regex: over the length bound", [], ("check_code", {"code": "A" * 4097}),
     ("deny", "code-form", E + 'argument "code" is longer than 4,096 characters, the most a regex rule tests')),
    ("host: exact", [], ("fetch", {"url": "https://api.example.com/v1?q=1"}), RUN),
    ("host: case and port", [], ("fetch", {"url": "HTTP://API.EXAMPLE.COM:443/"}), RUN),
    ("host: suffix", [], ("fetch", {"url": "https://eu.cdn.example.org/x"}), RUN),
    ("host: user info", [], ("fetch", {"url": "http://api.example.com@evil.test/"}),
     ("deny", "api-only", E + 'argument "url" is a URL with user info (user@)')),
    ("host: longer host", [], ("fetch", {"url": "https://api.example.com.evil.test/"}),
     ("deny", "api-only", "fetch only from api.example.com")),
    ("host: suffix without dot", [], ("fetch", {"url": "https://evilcdn.example.org/"}),
     ("deny", "api-only", "fetch only from api.example.com")),
    ("host: suffix itself", [], ("fetch", {"url": "https://cdn.example.org/"}),
     ("deny", "api-only", "fetch only from api.example.com")),
    ("host: other scheme", [], ("fetch", {"url": "file://api.example.com/etc/passwd"}),
     ("deny", "api-only", E + 'argument "url" is not an http or https URL')),
    ("host: backslash", [], ("fetch", {"url": "https://api.example.com\\@evil.test/"}),
     ("deny", "api-only", E + 'argument "url" is a URL with white space, a control character or a backslash')),
    ("host: bad port", [], ("fetch", {"url": "https://api.example.com:99999/"}),
     ("deny", "api-only", E + 'argument "url" is not a URL this rule can read')),
    ("host: no scheme", [], ("fetch", {"url": "//api.example.com/"}),
     ("deny", "api-only", E + 'argument "url" is not an http or https URL')),
    ("host: unicode name, punycode pattern", [], ("fetch", {"url": "https://M\u00fcnchen.example/"}), RUN),
    ("host: punycode name, unicode pattern", [], ("fetch", {"url": "https://xn--bcher-kva.example/"}), RUN),
    ("host: IDNA deviation", [], ("fetch", {"url": "https://fa\u00df.example/"}),
     ("deny", "api-only", E + 'argument "url" has a host name that IDNA versions read differently (\u00df, '
                             '\u03c2, ZWJ or ZWNJ)')),
    ("host: percent in the host", [], ("fetch", {"url": "https://api%2eexample.com/"}),
     ("deny", "api-only", E + 'argument "url" has a host that is not a name or an address')),
    ("host never: the address", [], ("open_url", {"url": "http://127.0.0.1/"}),
     ("deny", "no-loopback", "never this machine")),
    ("host never: user info", [], ("open_url", {"url": "http://user@127.0.0.1/"}),
     ("deny", "no-loopback", E + 'argument "url" is a URL with user info (user@)')),
    ("host never: 127.1", [], ("open_url", {"url": "http://127.1/"}), ("deny", "no-loopback", "never this machine")),
    ("host never: one number", [], ("open_url", {"url": "http://2130706433/"}),
     ("deny", "no-loopback", "never this machine")),
    ("host never: hex", [], ("open_url", {"url": "http://0x7f.1/"}), ("deny", "no-loopback", "never this machine")),
    ("host never: octal", [], ("open_url", {"url": "http://0177.0.0.1:8080/x"}),
     ("deny", "no-loopback", "never this machine")),
    ("host never: trailing dot", [], ("open_url", {"url": "http://127.0.0.1./"}),
     ("deny", "no-loopback", "never this machine")),
    ("host never: IPv4-mapped IPv6", [], ("open_url", {"url": "http://[::ffff:127.0.0.1]/"}),
     ("deny", "no-loopback", "never this machine")),
    ("host never: IPv4-mapped IPv6 in hex", [], ("open_url", {"url": "http://[::FFFF:7f00:1]/"}),
     ("deny", "no-loopback", "never this machine")),
    ("host never: IPv6 spelt out", [], ("open_url", {"url": "http://[0:0:0:0:0:0:0:1]:80/"}),
     ("deny", "no-loopback", "never this machine")),
    ("host never: fullwidth digits", [], ("open_url", {"url": "http://\uff11\uff12\uff17\uff0e0\uff0e0\uff0e1/"}),
     ("deny", "no-loopback", "never this machine")),
    ("host never: name case and dot", [], ("open_url", {"url": "http://LocalHost./"}),
     ("deny", "no-loopback", "never this machine")),
    ("host never: a number that is no address", [], ("open_url", {"url": "http://127.0.0.256/"}),
     ("deny", "no-loopback", E + 'argument "url" has a host that ends in a number but is not an IPv4 address')),
    ("host never: five parts", [], ("open_url", {"url": "http://1.127.0.0.1/"}),
     ("deny", "no-loopback", E + 'argument "url" has a host that ends in a number but is not an IPv4 address')),
    ("host never: 09 is not octal", [], ("open_url", {"url": "http://09.0.0.1/"}),
     ("deny", "no-loopback", E + 'argument "url" has a host that ends in a number but is not an IPv4 address')),
    ("host never: zone", [], ("open_url", {"url": "http://[fe80::1%25eth0]/"}),
     ("deny", "no-loopback", E + 'argument "url" has an IPv6 address with a zone')),
    ("host never: other scheme", [], ("open_url", {"url": "ftp://127.0.0.1/"}),
     ("deny", "no-loopback", E + 'argument "url" is not an http or https URL')),
    ("host never: another address", [], ("open_url", {"url": "http://127.0.0.2/"}), RUN),
    ("host never: a name", [], ("open_url", {"url": "https://example.com/"}), RUN),
    ("in: member", [], ("set_status", {"status": "closed"}), RUN),
    ("in: not a member", [], ("set_status", {"status": "pending"}),
     ("deny", "status-values", "status is open or closed")),
    ("in: true is not a string", [], ("set_status", {"status": True}),
     ("deny", "status-values", "status is open or closed")),
    ("eq: 1e3 equals 1000", [], ("set_flag", {"flag": {"value": 1e3}}), RUN),
    ("eq: true is not 1000", [], ("set_flag", {"flag": {"value": True}}), ("deny", "flag-value", "the flag is 1000")),
    ("eq: nested missing", [], ("set_flag", {"flag": {}}),
     ("deny", "flag-value", E + 'argument "flag.value" is missing')),
    ("number: small allowed without a person", [], ("refund", {"amount": 100}), RUN),
    ("number: above 100 asks", [], ("refund", {"amount": 100.5}),
     ("ask", "refund-review", "a person checks refunds above 100")),
    ("number: 1e3 is 1000", [], ("refund", {"amount": 1e3}), ("ask", "refund-review", "a person checks refunds above 100")),
    ("number: above 1000 denied", [], ("refund", {"amount": 1000.01}), ("deny", "refund-cap", "no refund above 1,000")),
    ("number: true is not a number", [], ("refund", {"amount": True}),
     ("deny", "refund-cap", E + 'argument "amount" is a boolean, not a number')),
    ("number: string is not a number", [], ("refund", {"amount": "5"}),
     ("deny", "refund-cap", E + 'argument "amount" is a string, not a number')),
    ("number: missing", [], ("refund", {}), ("deny", "refund-cap", E + 'argument "amount" is missing')),
    ("length: at the bound", [], ("send_email", {"body": "é" * 5000}), RUN),
    ("length: over", [], ("send_email", {"body": "x" * 5001}),
     ("deny", "short-mail", "a body of at most 5,000 characters")),
    ("length: array counts items", [], ("send_email", {"body": ["x"] * 3}), RUN),
    ("length: wrong type", [], ("send_email", {"body": 5}),
     ("deny", "short-mail", E + 'argument "body" is a number, not a string or an array')),
    ("after: none before", [], ("cancel_order", {"order_id": 1}),
     ("deny", "look-first", "get_order of that order first")),
    ("after: same order", [("get_order", {"order_id": 1})], ("cancel_order", {"order_id": 1}), RUN),
    ("after: 1.0 is 1", [("get_order", {"order_id": 1.0})], ("cancel_order", {"order_id": 1}), RUN),
    ("after: other order", [("get_order", {"order_id": 2})], ("cancel_order", {"order_id": 1}),
     ("deny", "look-first", "get_order of that order first")),
    ("after: missing argument", [("get_order", {"order_id": 1})], ("cancel_order", {}),
     ("deny", "look-first", E + 'argument "order_id" is missing')),
    ("count: within", [("search", {"q": "a"})], ("search", {"q": "b"}), RUN),
    ("count: over", [("search", {"q": "a"}), ("search", {"q": "b"})], ("search", {"q": "c"}),
     ("deny", "search-budget", "at most 2 searches")),
    ("count: all tools within", [("echo", {"v": i}) for i in range(11)], ("get_order", {"order_id": 1}), RUN),
    ("count: all tools over", [("echo", {"v": i}) for i in range(12)], ("get_order", {"order_id": 1}),
     ("deny", "session-budget", "at most 12 calls a session")),
    ("count: a denied call does not count",
     [("search", {"q": "a"}), ("search", {"q": "b"}), ("search", {"q": "c"})], ("echo", {"v": 1}), RUN),
    ("identical: the third", [("ping", {"host": "a"})] * 2, ("ping", {"host": "a"}), RUN),
    ("identical: the fourth", [("ping", {"host": "a"})] * 3, ("ping", {"host": "a"}),
     ("deny", "no-loop", "the same ping at most 3 times")),
    ("identical: canonically equal arguments",
     [("ping", {"host": "a", "n": 1}), ("ping", {"n": 1, "host": "a"}), ("ping", {"n": 1.0, "host": "a"})],
     ("ping", {"n": 1e0, "host": "a"}), ("deny", "no-loop", "the same ping at most 3 times")),
    ("identical: other arguments", [("ping", {"host": "a"})] * 3, ("ping", {"host": "b"}), RUN),
    ("identical: other tools", [("ping", {"host": "a"})] * 3, ("poll", {"host": "a"}), RUN),
    ("identical: a denied call does not count", [("ping", {"host": "a"})] * 4 + [("ping", {"host": "b"})] * 3,
     ("ping", {"host": "b"}), ("deny", "no-loop", "the same ping at most 3 times")),
    ("identical seconds: in the window", [("poll", {"q": 1})] * 2, ("poll", {"q": 1}),
     ("deny", "no-burst", "the same poll at most twice in 250 s")),
    # 100 s apart: the first poll left the window, the third was denied and does not count
    ("identical seconds: out of the window", [("poll", {"q": 1})] * 3, ("poll", {"q": 1}), RUN),
    ("shadow: a shadow deny does not deny", [], ("echo", {"v": 13}), RUN),
    ("shadow: a shadow ask does not ask", [("echo", {"v": 1})], ("echo", {"v": 1}), RUN),
]


def _confirm_never(tool: str, args: dict[str, Any]) -> bool:
    return False


class Harness(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory)
        self.policy_path = self.write("policy.json", json.dumps(POLICY))
        self.policy = load_policy(self.policy_path)

    def write(self, name: str, text: str) -> str:
        path = os.path.join(self.directory, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path

    def gate(self, record: str | None = None, clock: Any = None, confirm: Any = _confirm_never) -> tuple[Gate, list[str]]:
        ran: list[str] = []

        def tool(name: str) -> Any:
            def run(**args: Any) -> dict[str, Any]:
                ran.append(name)
                return {"ok": True}
            return run

        recorder = SessionRecorder.open(record) if record else None
        if recorder is not None:
            self.addCleanup(recorder.close)
        tick = iter(range(10**6))
        wall_tick = iter(range(10**6))  # the record's times (meta.ts), 100 s apart like the gate's clock
        gate = Gate({name: tool(name) for name in TOOLS}, self.policy, confirm=confirm, recorder=recorder,
                    clock=clock or (lambda: float(next(tick)) * 100),
                    wall_clock=lambda: 1_796_140_800 * 10**9 + next(wall_tick) * 100 * 10**9)
        return gate, ran

    def scope(self, session: str, *options: str) -> tuple[int, str, str]:
        io = IO.memory()
        code = main(["scope", session, self.policy_path, *options], io)
        return code, io.out(), io.err()


class TableTest(Harness):
    def test_every_case_at_the_guard_and_in_the_backtest(self) -> None:
        for case, history, (tool, args), expected in CASES:
            with self.subTest(case=case):
                record = os.path.join(self.directory, "record.jsonl")
                if os.path.exists(record):
                    os.unlink(record)
                asked: list[str] = []

                def confirm(name: str, call: dict[str, Any], asked: list[str] = asked, tool: str = tool) -> bool:
                    asked.append(name)
                    return name != tool  # earlier writes are approved; the call under test is not

                gate, ran = self.gate(record, confirm=confirm)
                for earlier in history:
                    gate.call(*earlier)
                before, asked[:] = len(ran), []
                response = gate.call(tool, args)
                if expected == RUN:
                    self.assertEqual(response, {"ok": True})
                    self.assertEqual(ran[before:], [tool])
                    self.assertEqual(asked, [])
                    want = None
                else:
                    effect, rule_id, reason = expected
                    self.assertEqual(ran[before:], [])
                    if effect == "deny":
                        self.assertEqual(response, {"ok": False, "error": f"denied by rule {rule_id}: {reason}"})
                        self.assertEqual(asked, [])
                    else:
                        self.assertEqual(response, {"ok": False, "error": "confirmation declined"})
                        self.assertEqual(asked, [tool])
                    # The record says the guard refused it: blocked, with the rule (information, not a violation).
                    refusal = (f"denied by rule {rule_id}: {reason}" if effect == "deny"
                               else f"(rule {rule_id}): confirmation declined")
                    want = f"index {len(history)}: blocked: tool '{tool}' was refused by the guard{':' if effect == 'deny' else ''} {refusal}"
                gate._recorder.close()  # type: ignore[union-attr]
                code, out, err = self.scope(record)
                lines = out.split("\n")
                # the shadow rules' own lines are ShadowTest's: here, what the guard did with the call
                found = [line for line in lines if line.startswith(f"index {len(history)}: ") and ": shadow: " not in line]
                self.assertEqual(found, [] if want is None else [want])
                self.assertEqual(err, "")
                # The guard's record carries each call's time: the backtest checks the rate rule too.
                self.assertFalse([line for line in lines if line.startswith("not checked")], out)


class RootTest(Harness):
    RULES = [{"id": "no-secrets", "tools": ["read_file"], "effect": "deny", "reason": "never secrets",
              "when": [{"arg": "path", "under": ["secrets"]}]}]

    def check(self, policy: Any, path: str) -> dict[str, Any]:
        gate = Gate({"read_file": lambda path: {"ok": True}}, policy)
        return gate.call("read_file", {"path": path})

    def test_a_relative_root_is_relative_to_the_policy_file(self) -> None:
        path = self.write("rooted.json", json.dumps({"agent": "a", "allowed_tools": ["read_file"],
                                                     "root": "project/./", "rules": self.RULES}))
        policy = load_policy(path)
        project = os.path.join(os.path.abspath(self.directory), "project")
        self.assertEqual(policy.root, project)
        self.assertEqual(self.check(policy, project + "/secrets/key"),
                         {"ok": False, "error": "denied by rule no-secrets: never secrets"})
        self.assertEqual(self.check(policy, project + "/public/key"), {"ok": True})
        self.assertEqual(self.check(policy, self.directory + "/secrets/key"),
                         {"ok": False, "error": "denied by rule no-secrets: rule error: argument \"path\" is an "
                                                "absolute path outside the policy's root"})

    def test_without_a_root_an_absolute_path_is_a_rule_error(self) -> None:
        policy = load_policy(self.write("plain.json", json.dumps({"agent": "a", "allowed_tools": ["read_file"],
                                                                  "rules": self.RULES})))
        self.assertIsNone(policy.root)
        self.assertEqual(self.check(policy, "/abs/secrets/key"),
                         {"ok": False, "error": "denied by rule no-secrets: rule error: argument \"path\" is an "
                                                "absolute path and the policy declares no root"})
        self.assertEqual(self.check(policy, "public/key"), {"ok": True})


class GuardTest(Harness):
    def test_rate_counts_calls_in_the_window(self) -> None:
        now = [0.0]
        gate, ran = self.gate(clock=lambda: now[0])
        for second in (0.0, 1.0, 2.0):
            now[0] = second
            self.assertEqual(gate.call("echo", {"v": second}), {"ok": True})
        now[0] = 9.0
        self.assertEqual(gate.call("echo", {"v": 9}),
                         {"ok": False, "error": "denied by rule pace: at most 3 calls in 10 seconds"})
        now[0] = 10.5  # the calls at 0 s left the window
        self.assertEqual(gate.call("echo", {"v": 10}), {"ok": True})
        self.assertEqual(len(ran), 4)

    def test_precedence_deny_over_ask_over_allow(self) -> None:
        gate, ran = self.gate(confirm=lambda tool, args: True)
        self.assertEqual(gate.call("refund", {"amount": 2000}),
                         {"ok": False, "error": "denied by rule refund-cap: no refund above 1,000"})
        asked: list[str] = []
        gate, ran = self.gate(confirm=lambda tool, args: asked.append(tool) or True)
        self.assertEqual(gate.call("refund", {"amount": 500}), {"ok": True})
        self.assertEqual(gate.call("refund", {"amount": 5}), {"ok": True})
        self.assertEqual(asked, ["refund"])  # the allow rule spared the small refund the question

    def test_ask_rule_error_asks_and_allow_rule_error_falls_back_to_write_tools(self) -> None:
        policy = dict(POLICY, rules=[
            {"id": "ask-big", "tools": ["echo"], "effect": "ask", "reason": "big", "when": [{"arg": "n", "gt": 9}]},
            {"id": "free", "tools": ["refund"], "effect": "allow", "reason": "x", "when": [{"arg": "n", "lt": 9}]}])
        self.policy = load_policy(self.write("p2.json", json.dumps(policy)))
        asked: list[tuple[str, dict[str, Any]]] = []
        gate, ran = self.gate(confirm=lambda tool, args: asked.append((tool, args)) or False)
        self.assertEqual(gate.call("echo", {"n": "ten"}), {"ok": False, "error": "confirmation declined"})
        self.assertEqual(gate.call("refund", {}), {"ok": False, "error": "confirmation declined"})
        self.assertEqual(gate.call("refund", {"n": 1}), {"ok": True})
        self.assertEqual(asked, [("echo", {"n": "ten"}), ("refund", {})])

    def test_a_refused_confirmation_does_not_count_as_executed(self) -> None:
        answers = iter([False, True])
        policy = dict(POLICY, write_tools=["get_order"])
        self.policy = load_policy(self.write("p4.json", json.dumps(policy)))
        gate, ran = self.gate(confirm=lambda tool, args: next(answers))
        # the person refuses the get_order: it did not execute, so the cancel after it is denied
        self.assertEqual(gate.call("get_order", {"order_id": 7}), {"ok": False, "error": "confirmation declined"})
        self.assertEqual(gate.call("cancel_order", {"order_id": 7}),
                         {"ok": False, "error": "denied by rule look-first: get_order of that order first"})
        self.assertEqual(gate.call("get_order", {"order_id": 7}), {"ok": True})
        self.assertEqual(gate.call("cancel_order", {"order_id": 7}), {"ok": True})
        self.assertEqual(ran, ["get_order", "cancel_order"])

    def test_a_resumed_record_counts_for_the_rules(self) -> None:
        record = os.path.join(self.directory, "resumed.jsonl")
        gate, _ = self.gate(record)
        self.assertEqual(gate.call("get_order", {"order_id": 3}), {"ok": True})
        self.assertEqual(gate.call("search", {"q": "a"}), {"ok": True})
        self.assertEqual(gate.call("get_order", {"order_id": 4, "x": 1}), {"ok": True})
        gate._recorder.close()  # type: ignore[union-attr]
        with open(record, "a", encoding="utf-8") as handle:  # a refusal on record did not run
            handle.write('{"index": 3, "tool": "get_order", "args": {"order_id": 5}, '
                         '"response": {"ok": false, "error": "budget exceeded: time"}}\n')
        gate, ran = self.gate(record)  # a restarted host continues the same record
        self.assertEqual(gate.call("cancel_order", {"order_id": 3}), {"ok": True})
        self.assertEqual(gate.call("cancel_order", {"order_id": 5}),
                         {"ok": False, "error": "denied by rule look-first: get_order of that order first"})
        self.assertEqual(gate.call("search", {"q": "b"}), {"ok": True})
        self.assertEqual(gate.call("search", {"q": "c"}),
                         {"ok": False, "error": "denied by rule search-budget: at most 2 searches"})
        self.assertEqual(ran, ["cancel_order", "search"])

    def test_count_and_identical_hold_under_racing_threads(self) -> None:
        import threading
        for condition, args in (({"count": "echo", "max": 5}, lambda n: {"v": n}),
                                ({"identical": "echo", "max": 5}, lambda n: {"v": 1}),
                                ({"identical": "*", "max": 5, "seconds": 10}, lambda n: {"v": 1})):
            with self.subTest(condition=condition):
                policy = dict(POLICY, rules=[{"id": "five", "tools": ["echo"], "effect": "deny", "reason": "five",
                                              "unless": [condition]}])
                self.policy = load_policy(self.write("p6.json", json.dumps(policy)))
                gate, ran = self.gate(clock=lambda: 0.0)
                start = threading.Barrier(32)

                def worker(n: int, gate: Gate = gate, start: threading.Barrier = start,
                           args: Any = args) -> None:
                    start.wait()
                    gate.call("echo", args(n))

                threads = [threading.Thread(target=worker, args=(n,)) for n in range(32)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                self.assertEqual(len(ran), 5)

    def test_a_cached_repeat_does_not_count_live_as_in_the_backtest(self) -> None:
        # A write's identical retry is answered from the first (outcome cached): it did not run, so it does
        # not count for later conditions, in the guard as in `scope` over the guard's record.
        policy = dict(POLICY, write_tools=["refund"], rules=[
            {"id": "two-refunds", "tools": ["refund"], "effect": "deny", "reason": "at most 2 refunds",
             "unless": [{"count": "refund", "max": 2}]},
            {"id": "once", "tools": ["refund"], "effect": "deny", "reason": "the same refund at most twice",
             "unless": [{"identical": "refund", "max": 2}]}])
        self.policy_path = self.write("p7.json", json.dumps(policy))
        self.policy = load_policy(self.policy_path)
        record = os.path.join(self.directory, "cached.jsonl")
        gate, ran = self.gate(record, confirm=lambda tool, args: True)
        answers = [gate.handle("refund", args).outcome for args in
                   ({"amount": 1}, {"amount": 1}, {"amount": 1}, {"amount": 2}, {"amount": 3})]
        self.assertEqual(answers, ["ran", "cached", "cached", "ran", "refused"])
        self.assertEqual(ran, ["refund", "refund"])
        gate._recorder.close()  # type: ignore[union-attr]
        self.assertEqual(self.scope(record), (0, "calls: 5\nfindings: 0\ninformation: 3\n"
                                                 "index 0: approved: tool 'refund' ran after a person's yes\n"
                                                 "index 3: approved: tool 'refund' ran after a person's yes\n"
                                                 "index 4: blocked: tool 'refund' was refused by the guard: denied by "
                                                 "rule two-refunds: at most 2 refunds\n", ""))
        gate, ran = self.gate(record, confirm=lambda tool, args: True)  # a restarted host counts the same way
        self.assertEqual(gate.call("refund", {"amount": 3}),
                         {"ok": False, "error": "denied by rule two-refunds: at most 2 refunds"})

    def test_rules_come_after_the_allowlist(self) -> None:
        gate, ran = self.gate()
        self.assertEqual(gate.call("rm", {}), {"ok": False, "error": "tool not allowed: rm"})


SHADOW_POLICY: dict[str, Any] = {
    "agent": "shadow-test", "allowed_tools": ["echo", "refund"], "write_tools": ["refund"],
    "rules": [
        {"id": "unlucky", "tools": ["echo"], "effect": "deny", "shadow": True, "reason": "13 and up are unlucky",
         "when": [{"arg": "v", "ge": 13}]},
        {"id": "big", "tools": ["refund"], "effect": "ask", "shadow": True, "reason": "big refunds",
         "when": [{"arg": "amount", "gt": 100}]},
        {"id": "small", "tools": ["refund"], "effect": "allow", "shadow": True, "reason": "small refunds",
         "when": [{"arg": "amount", "le": 100}]},
        {"id": "loop", "tools": ["*"], "effect": "ask", "shadow": True, "reason": "the same call again",
         "unless": [{"identical": "*", "max": 2}]},
        {"id": "never-99", "tools": ["echo"], "effect": "deny", "reason": "never 99", "when": [{"arg": "v", "eq": 99}]},
    ],
}


def _shadows(*entries: tuple[str, str, str]) -> list[dict[str, str]]:
    return [{"rule": rule, "effect": effect, "reason": reason} for rule, effect, reason in entries]


UNLUCKY = ("unlucky", "deny", "13 and up are unlucky")
# (call, its response, its outcome, its meta["x-shadow"] or None, whether the person was asked)
SHADOW_CASES: list[tuple[tuple[str, dict[str, Any]], dict[str, Any], str, Any, bool]] = [
    (("echo", {"v": 13}), {"ok": True}, "ran", _shadows(UNLUCKY), False),
    (("echo", {"v": 1}), {"ok": True}, "ran", None, False),
    (("echo", {"v": 13}), {"ok": True}, "ran", _shadows(UNLUCKY), False),
    # a shadow deny and a shadow ask hold: the call runs, unasked, and both are on record in rule order
    (("echo", {"v": 13}), {"ok": True}, "ran", _shadows(UNLUCKY, ("loop", "ask", "the same call again")), False),
    # the write tool is asked as always: neither a shadow ask nor a shadow allow changes that
    (("refund", {"amount": 500}), {"ok": True}, "ran", _shadows(("big", "ask", "big refunds")), True),
    (("refund", {"amount": 50}), {"ok": True}, "ran", _shadows(("small", "allow", "small refunds")), True),
    # a rule error: the shadow ask would have fired (with why), the shadow allow would not
    (("refund", {"amount": "x"}), {"ok": True}, "ran",
     _shadows(("big", "ask", 'rule error: argument "amount" is a string, not a number')), True),
    # a call the enforced rules refuse still says what the shadow rules would have decided
    (("echo", {"v": 99}), {"ok": False, "error": "denied by rule never-99: never 99"}, "refused", _shadows(UNLUCKY),
     False),
]


class ShadowTest(Harness):
    def test_a_shadow_rule_decides_nothing_and_is_on_record(self) -> None:
        self.policy_path = self.write("shadow.json", json.dumps(SHADOW_POLICY))
        self.policy = load_policy(self.policy_path)
        record = os.path.join(self.directory, "shadow.jsonl")
        asked: list[tuple[str, dict[str, Any]]] = []
        gate, ran = self.gate(record, confirm=lambda tool, args: asked.append((tool, args)) or True)
        for (tool, args), response, outcome, _shadow, was_asked in SHADOW_CASES:
            with self.subTest(call=(tool, args)):
                before = len(asked)
                answer = gate.handle(tool, args)
                self.assertEqual((answer.response, answer.outcome), (response, outcome))
                self.assertEqual(len(asked) - before, int(was_asked))
        gate._recorder.close()  # type: ignore[union-attr]
        self.assertEqual(ran, ["echo"] * 4 + ["refund"] * 3)
        with open(record, encoding="utf-8") as handle:
            metas = [json.loads(line)["meta"] for line in handle]
        self.assertEqual([meta.get("x-shadow") for meta in metas], [case[3] for case in SHADOW_CASES])
        # the backtest: the guard refused index 7 (blocked), a person approved the refunds, and each shadow
        # decision is information; nothing that ran broke an enforced rule (exit 0)
        unlucky = "shadow: shadow rule unlucky would deny tool 'echo': 13 and up are unlucky"
        self.assertEqual(self.scope(record), (0, "calls: 8\nfindings: 0\ninformation: 12\n" + "".join(f"index {line}\n" for line in (
            f"0: {unlucky}", f"2: {unlucky}", f"3: {unlucky}",
            "3: shadow: shadow rule loop would ask for confirmation tool 'echo': the same call again",
            "4: approved: tool 'refund' ran after a person's yes",
            "4: shadow: shadow rule big would ask for confirmation tool 'refund': big refunds",
            "5: approved: tool 'refund' ran after a person's yes",
            "5: shadow: shadow rule small would allow tool 'refund': small refunds",
            "6: approved: tool 'refund' ran after a person's yes",
            "6: shadow: shadow rule big would ask for confirmation tool 'refund': rule error: argument \"amount\" is "
            "a string, not a number",
            "7: blocked: tool 'echo' was refused by the guard: denied by rule never-99: never 99",
            f"7: {unlucky}")), ""))

    def test_without_a_recorder_a_shadow_rule_still_decides_nothing(self) -> None:
        policy = load_policy(self.write("shadow.json", json.dumps(SHADOW_POLICY)))
        gate = Gate({"echo": lambda v: {"v": v}}, policy)
        self.assertEqual([gate.call("echo", {"v": 13}) for _ in range(4)], [{"v": 13}] * 4)


class IdenticalStateTest(unittest.TestCase):
    def rules(self, condition: dict[str, Any]) -> RuleSet:
        policy = parse_policy({"agent": "a", "allowed_tools": ["ping"], "rules": [
            {"id": "loop", "tools": ["ping"], "effect": "deny", "reason": "r", "unless": [condition]}]})
        return RuleSet(policy.rules)

    def test_memory_grows_with_distinct_calls(self) -> None:
        for condition in ({"identical": "ping", "max": 1000}, {"identical": "*", "max": 1000, "seconds": 10**6}):
            with self.subTest(condition=condition):
                rules = self.rules(condition)
                state = RuleState(rules)
                for i in range(1000):
                    self.assertEqual(state.check("ping", rules.prepare("ping", {"n": i % 10, "pad": "x" * 500}),
                                                 float(i)).denials, [])
                table = state._identical if "seconds" not in condition else state._identical_times
                self.assertEqual(len(table), 10)
                self.assertTrue(all(len(key) == 32 for key in table))  # a digest, not the call

    def test_a_withdrawn_call_leaves_nothing_behind(self) -> None:
        rules = self.rules({"identical": "ping", "max": 1, "seconds": 5})
        state = RuleState(rules)
        ruling = state.check("ping", rules.prepare("ping", {"n": 1}), 0.0)
        self.assertEqual(len(state._identical_times), 1)
        state.withdraw(ruling)
        self.assertEqual((state._identical_times, state._identical), ({}, {}))
        self.assertEqual(state.check("ping", rules.prepare("ping", {"n": 1}), 1.0).denials, [])
        self.assertEqual(state.check("ping", rules.prepare("ping", {"n": 1}), 5.5).denials, [("loop", "r")])
        self.assertEqual(state.check("ping", rules.prepare("ping", {"n": 1}), 6.0).denials, [])  # 1.0 left


class BacktestTest(Harness):
    def session(self, lines: list[str]) -> str:
        return self.write("s.jsonl", "".join(f'{{"index": {i}, {line}}}\n' for i, line in enumerate(lines)))

    def test_numbers_in_their_written_forms(self) -> None:
        session = self.session([
            '"tool": "set_flag", "args": {"flag": {"value": 1e3}}, "response": {}',
            '"tool": "set_flag", "args": {"flag": {"value": 1000.0}}, "response": {}',
            '"tool": "set_flag", "args": {"flag": {"value": 10E2}}, "response": {}',
            '"tool": "set_flag", "args": {"flag": {"value": 1000.5}}, "response": {}',
            '"tool": "refund", "args": {"amount": 1e3}, "response": {}',
            '"tool": "refund", "args": {"amount": 1e4}, "response": {}',
        ])
        code, out, err = self.scope(session)
        self.assertEqual((code, err), (1, ""))
        self.assertEqual(out.split("\n")[2:5], [
            "index 3: policy-violation: tool 'set_flag' denied by rule flag-value: the flag is 1000",
            "index 4: policy-violation: tool 'refund' needs confirmation by rule refund-review: "
            "a person checks refunds above 100",
            "index 5: policy-violation: tool 'refund' denied by rule refund-cap: no refund above 1,000"])

    def test_a_recorded_refusal_did_not_execute(self) -> None:
        session = self.session([
            '"tool": "get_order", "args": {"order_id": 1}, "response": {"ok": false, "error": "budget exceeded: time"}',
            '"tool": "cancel_order", "args": {"order_id": 1}, "response": {"ok": true}',
            '"tool": "get_order", "args": {"order_id": 2}, "response": {"ok": false, "error": "not found"}',
            '"tool": "cancel_order", "args": {"order_id": 2}, "response": {"ok": true}',
        ])
        code, out, _ = self.scope(session)
        self.assertEqual(out, "calls: 4\nfindings: 1\nindex 1: policy-violation: tool 'cancel_order' denied by rule "
                              "look-first: get_order of that order first\nnot checked: rule pace: a rate needs the "
                              "time of each call (meta.ts), which this record does not carry\n"
                              "not checked: rule no-burst: a rate needs the time of each call (meta.ts), which this "
                              "record does not carry\n")

    def test_a_shadow_rule_is_neither_a_finding_nor_unchecked(self) -> None:
        policy = {"agent": "a", "allowed_tools": ["search"], "rules": [
            {"id": "no-loop", "tools": ["search"], "effect": "deny", "shadow": True, "reason": "a loop",
             "unless": [{"identical": "search", "max": 1}]},
            {"id": "pace", "tools": ["*"], "effect": "deny", "shadow": True, "reason": "fast",
             "unless": [{"rate": "*", "max": 1, "seconds": 60}]}]}
        self.policy_path = self.write("p8.json", json.dumps(policy))
        session = self.session(['"tool": "search", "args": {"q": 1}, "response": {}'] * 3)
        self.assertEqual(self.scope(session), (0, "calls: 3\nfindings: 0\n", ""))
        policy["rules"][0]["shadow"] = False  # enforced, the same rule is a backtest finding
        self.policy_path = self.write("p8.json", json.dumps(policy))
        self.assertEqual(self.scope(session), (1, "calls: 3\nfindings: 2\n"
                                                  "index 1: policy-violation: tool 'search' denied by rule no-loop: "
                                                  "a loop\nindex 2: policy-violation: tool 'search' denied by rule "
                                                  "no-loop: a loop\n", ""))

    def test_order_at_one_index_and_json_rule_field(self) -> None:
        policy = dict(POLICY, rules=[
            {"id": "b", "tools": ["echo"], "effect": "deny", "reason": "second", "when": [{"arg": "v", "gt": 1}]},
            {"id": "a", "tools": ["*"], "effect": "deny", "reason": "first", "when": [{"arg": "v", "gt": 2}]},
            {"id": "c", "tools": ["echo"], "effect": "ask", "reason": "ask", "when": [{"arg": "v", "gt": 0}]}])
        self.policy_path = self.write("p3.json", json.dumps(policy))
        session = self.session(['"tool": "echo", "args": {"v": 3}, "response": {}',
                                '"tool": "rm", "args": {"v": 3}, "response": {}',
                                '"tool": "echo", "args": {"v": 1}, "response": {}'])
        code, out, _ = self.scope(session)
        self.assertEqual(out, "calls: 3\nfindings: 4\n"
                              "index 0: policy-violation: tool 'echo' denied by rule b: second\n"
                              "index 0: policy-violation: tool 'echo' denied by rule a: first\n"
                              "index 1: permission-overreach: tool 'rm' is not in the declared scope for agent "
                              "'rules-test'\n"
                              "index 2: policy-violation: tool 'echo' needs confirmation by rule c: ask\n")
        code, out, _ = self.scope(session, "--format", "json")
        document = json.loads(out)
        self.assertEqual(document["unchecked_rules"], [])
        self.assertEqual([(f["kind"], f.get("rule", "absent")) for f in document["findings"]],
                         [("policy-violation", "b"), ("policy-violation", "a"),
                          ("permission-overreach", None), ("policy-violation", "c")])
        # one field order for every finding, in every JSON report (scope, replay, audit)
        for finding in document["findings"]:
            self.assertEqual(list(finding), ["index", "kind", "severity", "tool", "rule", "related_index", "message"])

    def test_parallel_reader_gives_the_same_report(self) -> None:
        lines = []
        for i in range(3000):
            lines.append(f'"tool": "get_order", "args": {{"order_id": {i % 7}}}, "response": {{"pad": "{"x" * 200}"}}')
            lines.append(f'"tool": "cancel_order", "args": {{"order_id": {i % 11}}}, "response": {{}}')
        session = self.session(lines)
        rules = [rule for rule in POLICY["rules"] if rule["id"] != "session-budget"]
        self.policy_path = self.write("p5.json", json.dumps(dict(POLICY, rules=rules)))
        self.policy = load_policy(self.policy_path)
        code, serial, _ = self.scope(session, "--jobs", "1")
        facts = read_facts(session, rule_fact_extractor(self.policy), jobs=2, chunk_bytes=64 << 10,
                           min_parallel_bytes=0)
        self.assertTrue(scope_text(audit_rule_facts(facts, self.policy)) == serial)  # no 100 kB diff
        self.assertEqual(serial[:27], "calls: 6000\nfindings: 1089\n")


class MatcherTest(unittest.TestCase):
    def test_path_segments(self) -> None:
        for path, segments in [("docs/a", ("docs", "a")), ("./docs//a/", ("docs", "a")), ("a/../b", ("b",)),
                               ("..", 'climbs above its start with ".."'), ("a/../..", 'climbs above its start with ".."'),
                               ("/x", "is an absolute path"), ("C:x", "starts with a drive letter"),
                               ("\\x", "holds a backslash, which a path rule reads neither as a separator nor as a name"),
                               ("a\\b", "holds a backslash, which a path rule reads neither as a separator nor as a name"),
                               ("~/x", "starts with ~ (a home folder, which a path rule cannot resolve)"),
                               ("", "is an empty path"), ("a\x00", "holds a NUL character"), (".", ())]:
            with self.subTest(path=path):
                if isinstance(segments, str):
                    with self.assertRaises(MatchError) as caught:
                        path_segments(path)
                    self.assertEqual(str(caught.exception), segments)
                else:
                    self.assertEqual(path_segments(path), segments)

    def test_resolve_path(self) -> None:
        root = ("srv", "project")
        for path, expected in [("a/b", ("a", "b")), ("/srv/project/a/./b", ("a", "b")), ("/srv/project", ()),
                               ("//srv/project/a", ("a",)), ("/srv/project/../project/a", ("a",)),
                               ("/srv/projects/a", "is an absolute path outside the policy's root"),
                               ("/srv/project/../other/a", "is an absolute path outside the policy's root"),
                               ("/..", 'climbs above / with ".."'),
                               ("../project/a", 'climbs above its start with ".."')]:
            with self.subTest(path=path):
                if isinstance(expected, str):
                    with self.assertRaises(MatchError) as caught:
                        resolve_path(path, root)
                    self.assertEqual(str(caught.exception), expected)
                else:
                    self.assertEqual(resolve_path(path, root), expected)
        with self.assertRaises(MatchError) as caught:
            resolve_path("/srv/project/a", None)
        self.assertEqual(str(caught.exception), "is an absolute path and the policy declares no root")

    def test_url_host(self) -> None:
        for url, host in [("https://API.Example.com./x", "api.example.com"), ("http://[::1]:80/", "[::1]"),
                          ("http://a.test:0/", "a.test"), ("http://0x7F.0.0.1/", "127.0.0.1"),
                          ("http://10.1/", "10.0.0.1"), ("http://192.168.257/", "192.168.1.1"),
                          ("http://0/", "0.0.0.0"), ("http://4294967295/", "255.255.255.255"),
                          ("http://[::ffff:10.0.0.1]/", "10.0.0.1"), ("http://[2001:DB8::0:1]/", "[2001:db8::1]"),
                          ("http://B\u00fccher.example/", "xn--bcher-kva.example"), ("http://1_0/", "1_0"),
                          ("http://u:p@a.test/", "is a URL with user info (user@)"),
                          ("https:a.test", "is not an http or https URL"),
                          ("https://a.test /", "is a URL with white space, a control character or a backslash"),
                          ("javascript://a.test/", "is not an http or https URL"),
                          ("http:///x", "is a URL without a host"),
                          ("https://a.test:port/", "is not a URL this rule can read"),
                          ("http://4294967296/", "has a host that ends in a number but is not an IPv4 address"),
                          ("http://0x/", "has a host that ends in a number but is not an IPv4 address"),
                          ("http://a.1/", "has a host that ends in a number but is not an IPv4 address"),
                          ("http://a..test/", "has a host that is not a name or an address"),
                          ("http://a.test../", "has a host that is not a name or an address"),
                          ("http://a!.test/", "has a host that is not a name or an address")]:
            with self.subTest(url=url):
                if " " in host or host.startswith("is"):
                    with self.assertRaises(MatchError) as caught:
                        url_host(url)
                    self.assertEqual(str(caught.exception), host)
                else:
                    self.assertEqual(url_host(url), host)


class RegexBoundTest(unittest.TestCase):
    def test_bounded_patterns_load(self) -> None:
        for pattern in (r"[A-Z]{6}", r"[a-z]+-[0-9]{6}/(src|docs|tests|lib|config|scripts)/.+", r"[^@]+@example\.com",
                        r"(\d{1,3}\.){3}\d{1,3}", r"(?:a|b)*", r".*\.py", r"(ab)+", r"(?:x|y)?\w+", r"(?=\w+$).*"):
            with self.subTest(pattern=pattern):
                self.assertEqual(compile_bounded(pattern).pattern, pattern)

    def test_unbounded_patterns_are_refused(self) -> None:
        nested = ("repeats a part that can match in more than one way (a nested quantifier or an alternation "
                  "inside * + or {n,}), which can take exponential time")
        long = "has too many variable-length parts: it could try more than 134,217,728 ways on an argument of 4,096 " \
               "characters"
        for pattern, message in ((r"(\w+\s?)+", nested), (r"(a|aa)*", nested), (r"(a?a?)*", nested),
                                 (r"(?:x+)*y", nested), (r"((ab)*c)+", nested), (r"(?=(a+)+)b", nested),
                                 (r"\w*\w*\w*!", long), (r"(\w+\s?){1,1000}", long), (r".*,.*,.*", long)):
            with self.subTest(pattern=pattern), self.assertRaises(ValueError) as caught:
                compile_bounded(pattern)
            self.assertEqual(str(caught.exception), message)


BAD_RULES: list[tuple[str, Any, str]] = [
    ("not an array", {}, 'field "rules" must be an array of rules'),
    ("rule not object", [1], "rule 1: must be an object, not 1"),
    ("missing id", [{}], 'rule 1: missing field "id"'),
    ("bad id", [{"id": "a b"}], 'rule 1: field "id" must be letters, digits, "_", "." or "-", not "a b"'),
    ("duplicate id", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r"}] * 2,
     'rule "a": the id is used by an earlier rule'),
    ("unknown field", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r", "if": []}],
     'rule "a": unknown field "if" in a rule (known: id, tools, effect, reason, when, unless, shadow)'),
    ("tool not allowed", [{"id": "a", "tools": ["ghost"], "effect": "deny", "reason": "r"}],
     'rule "a": field "tools" names tool "ghost", which is not in allowed_tools'),
    ("star with names", [{"id": "a", "tools": ["*", "echo"], "effect": "deny", "reason": "r"}],
     'rule "a": field "tools" is either ["*"] or a list of tool names'),
    ("bad effect", [{"id": "a", "tools": ["echo"], "effect": "block", "reason": "r"}],
     'rule "a": field "effect" must be one of deny, ask, allow, not "block"'),
    ("empty reason", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": ""}],
     'rule "a": field "reason" must be a non-empty string'),
    ("empty when", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r", "when": []}],
     'rule "a": "when" must be a non-empty array of conditions'),
    ("unknown operator", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                           "when": [{"arg": "x", "lte": 1}]}],
     'rule "a": "when" condition 1: unknown operator "lte" (known: under, glob, regex, host, eq, in, lt, le, gt, '
     'ge, max_length, min_length)'),
    ("two operators", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                        "when": [{"arg": "x", "lt": 1, "gt": 0}]}],
     'rule "a": "when" condition 1: an argument condition has "arg" and exactly one operator'),
    ("bad regex", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                    "unless": [{"arg": "x", "regex": "(unclosed"}]}],
     'rule "a": "unless" condition 1: operator "regex": bad regular expression "(unclosed": '
     'missing ), unterminated subpattern at position 0'),
    ("number operand true", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                              "when": [{"arg": "x", "gt": True}]}],
     'rule "a": "when" condition 1: operator "gt" must be a number'),
    ("length operand 2.0", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                             "when": [{"arg": "x", "max_length": 2.0}]}],
     'rule "a": "when" condition 1: operator "max_length" must be an integer of at least 0'),
    ("under escapes", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                        "when": [{"arg": "x", "under": ["../x"]}]}],
     'rule "a": "when" condition 1: operator "under": folder "../x" must be a relative path inside the working '
     'folder'),
    ("bad host", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                   "when": [{"arg": "x", "host": ["https://a.test"]}]}],
     'rule "a": "when" condition 1: operator "host": "https://a.test" is not a host name, an IP address, or "*." '
     'followed by a host name'),
    ("wildcard address", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                           "when": [{"arg": "x", "host": ["*.0.0.1"]}]}],
     'rule "a": "when" condition 1: operator "host": "*.0.0.1" is not a host name, an IP address, or "*." '
     'followed by a host name'),
    ("folder with a backslash", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                                  "when": [{"arg": "x", "under": ["docs\\x"]}]}],
     'rule "a": "when" condition 1: operator "under": folder "docs\\\\x" must be a relative path inside the '
     'working folder'),
    ("nested quantifier", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                            "when": [{"arg": "x", "regex": "(\\w+\\s?)+"}]}],
     'rule "a": "when" condition 1: operator "regex": "(\\\\w+\\\\s?)+" repeats a part that can match in more '
     'than one way (a nested quantifier or an alternation inside * + or {n,}), which can take exponential time'),
    ("alternation repeated", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                               "when": [{"arg": "x", "regex": "(a|aa)*"}]}],
     'rule "a": "when" condition 1: operator "regex": "(a|aa)*" repeats a part that can match in more '
     'than one way (a nested quantifier or an alternation inside * + or {n,}), which can take exponential time'),
    ("too many variable parts", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                                  "when": [{"arg": "x", "regex": "\\w*\\w*\\w*!"}]}],
     'rule "a": "when" condition 1: operator "regex": "\\\\w*\\\\w*\\\\w*!" has too many variable-length parts: '
     'it could try more than 134,217,728 ways on an argument of 4,096 characters'),
    ("after unknown tool", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                             "unless": [{"after": "ghost"}]}],
     'rule "a": "unless" condition 1: "after" names tool "ghost", which is not in allowed_tools'),
    ("count 1e2", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                    "unless": [{"count": "*", "max": 1e2}]}],
     'rule "a": "unless" condition 1: "max" must be an integer of at least 0'),
    ("rate huge seconds", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                            "unless": [{"rate": "*", "max": 1, "seconds": 10**400}]}],
     'rule "a": "unless" condition 1: "seconds" is too large: 1000000000000000000000000000000000000...'),
    ("no subject", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r", "when": [{"x": 1}]}],
     'rule "a": "when" condition 1: a condition needs one of "arg", "after", "count", "rate", "identical", '
     'not {"x": 1}'),
    ("shadow a string", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r", "shadow": "yes"}],
     'rule "a": field "shadow" must be true or false, not "yes"'),
    ("shadow a number", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r", "shadow": 1}],
     'rule "a": field "shadow" must be true or false, not 1'),
    ("shadow null", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r", "shadow": None}],
     'rule "a": field "shadow" must be true or false, not null'),
    ("identical without max", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                                "unless": [{"identical": "echo"}]}],
     'rule "a": "unless" condition 1: an "identical" condition needs "max"'),
    ("identical max 0", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                          "unless": [{"identical": "echo", "max": 0}]}],
     'rule "a": "unless" condition 1: "max" must be a positive integer'),
    ("identical max 3.0", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                            "unless": [{"identical": "echo", "max": 3.0}]}],
     'rule "a": "unless" condition 1: "max" must be a positive integer'),
    ("identical max true", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                             "unless": [{"identical": "echo", "max": True}]}],
     'rule "a": "unless" condition 1: "max" must be a positive integer'),
    ("identical seconds 0", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                              "unless": [{"identical": "*", "max": 3, "seconds": 0}]}],
     'rule "a": "unless" condition 1: "seconds" must be a positive number'),
    ("identical seconds a string", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                                     "when": [{"identical": "*", "max": 3, "seconds": "60"}]}],
     'rule "a": "when" condition 1: "seconds" must be a positive number'),
    ("identical unknown field", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                                  "unless": [{"identical": "echo", "max": 3, "same": ["x"]}]}],
     'rule "a": "unless" condition 1: unknown field "same" in an "identical" condition (known: identical, max, '
     'seconds)'),
    ("identical not a name", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                               "unless": [{"identical": ["echo"], "max": 3}]}],
     'rule "a": "unless" condition 1: "identical" must be a tool name or "*"'),
    ("identical unknown tool", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                                 "unless": [{"identical": "ghost", "max": 3}]}],
     'rule "a": "unless" condition 1: "identical" names tool "ghost", which is not in allowed_tools'),
    ("identical another tool", [{"id": "a", "tools": ["echo"], "effect": "deny", "reason": "r",
                                 "unless": [{"arg": "x", "eq": 1}, {"identical": "ping", "max": 3}]}],
     'rule "a": "unless" condition 2: "identical" names tool "ping", which is not one of the rule\'s tools'),
]


class LoadTest(Harness):
    def check(self, text: str, message: str) -> None:
        path = self.write("bad.json", text)
        io = IO.memory()
        self.assertEqual(main(["scope", self.write("s.jsonl", ""), path], io), 2)
        self.assertEqual((io.out(), io.err()), ("", f"error: {path}: {message}\n"))

    def test_bad_rules(self) -> None:
        for case, rules, message in BAD_RULES:
            with self.subTest(case=case):
                self.check(json.dumps({"agent": "a", "allowed_tools": ["echo", "ping"], "rules": rules}), message)

    def test_strict_fields(self) -> None:
        base = '{"agent": "a", "allowed_tools": ["echo"], '
        for text, message in [
            (base + '"write_tools": ["refund"]}',
             'write tool "refund" is not in allowed_tools (a write tool must be allowed to be confirmed)'),
            (base + '"repeatable_tools": ["append"]}', 'repeatable tool "append" is not in allowed_tools'),
            (base + '"repeatable_tools": "echo"}', 'field "repeatable_tools" must be an array of strings'),
            (base + '"limits": {"max_steps": 2.0}}', 'limit "max_steps" must be a positive integer'),
            (base + '"root": ""}', 'field "root" must be a folder (a non-empty string)'),
            (base + '"root": ["/srv"]}', 'field "root" must be a folder (a non-empty string)'),
            (base + '"root": "~/project"}', 'field "root" must be a folder path without ~, backslash or NUL'),
            (base + '"root": "C:\\\\project"}', 'field "root" must be a folder path without ~, backslash or NUL'),
            ('{"agent": "a", "allowed_tools": ["echo", "book_*"]}',
             'field "allowed_tools" item 1 "book_*" is a pattern, not a tool name: tool names match exactly, so '
             'list each tool'),
            ('{"agent": "a", "allowed_tools": ["*"]}',
             'field "allowed_tools" item 0 "*" is a pattern, not a tool name: tool names match exactly, so list '
             'each tool'),
            ('{"agent": "a", "allowed_tools": ["get_[ab]", "a?"]}',
             'field "allowed_tools" item 0 "get_[ab]" is a pattern, not a tool name: tool names match exactly, '
             'so list each tool'),
            (base + '"limits": {"max_steps": 5.0}}', 'limit "max_steps" must be a positive integer'),
            (base + '"limits": {"max_result_bytes": 1e2}}', 'limit "max_result_bytes" must be a positive integer'),
            (base + '"limits": {"max_steps": true}}', 'limit "max_steps" must be a positive integer'),
            (base + '"limits": {"max_seconds": 1' + "0" * 400 + '}}',
             'limit "max_seconds" is too large: 1000000000000000000000000000000000000...'),
        ]:
            with self.subTest(text=text[:80]):
                self.check(text, message)

    def test_lone_surrogate(self) -> None:
        message = "string holds a lone surrogate (invalid Unicode escape)"
        path = self.write("bad.json", '{"agent": "a",\n "allowed_tools": ["\\ud800"]}')
        io = IO.memory()
        self.assertEqual(main(["scope", self.write("s.jsonl", ""), path], io), 2)
        self.assertEqual(io.err(), f"error: {path}:2: {message}\n")
        for text in ('{"agent": "\\udc00x", "allowed_tools": []}', '{"agent": "\\ud83d\\ud83d", "allowed_tools": []}'):
            with self.subTest(text=text):
                path = self.write("bad.json", text)
                io = IO.memory()
                self.assertEqual(main(["scope", self.write("s.jsonl", ""), path], io), 2)
                self.assertEqual(io.err(), f"error: {path}:1: {message}\n")
        suite = self.write("suite.json", '{"name": "s",\n "cases": [],\n "x": "\\udfff"}')
        with self.assertRaises(InputError) as caught:
            read_json_file(suite)  # every JSON file the tool reads: eval suites too
        self.assertEqual(str(caught.exception), f"{suite}:3: {message}")
        ok = self.write("ok.json", '{"agent": "\\\\ud800 \\ud83d\\ude00", "allowed_tools": []}')
        self.assertEqual(load_policy(ok).agent, "\\ud800 \U0001f600")


if __name__ == "__main__":
    unittest.main()
