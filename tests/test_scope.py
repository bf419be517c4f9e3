"""`scope` (SPEC.md §5) and the permission file it reads."""

from __future__ import annotations

import io
import os
import tempfile
import unittest
from typing import Any

from toolreplay.audit.render import scope_text
from toolreplay.audit.scope import ScopeReport, audit_scope
from toolreplay.errors import InputError, UsageError
from toolreplay.format.records import format_record, read_session
from toolreplay.policy.model import Limits, Policy, load_policy, parse_policy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _scope(tools: list[str], allowed: list[str], agent: str = "reader") -> ScopeReport:
    data = "".join(format_record(i, tool, {}, {}) + "\n" for i, tool in enumerate(tools)).encode()
    return audit_scope(read_session(io.BytesIO(data), "s"), Policy(agent, frozenset(allowed)))


class AuditScopeTest(unittest.TestCase):
    def test_exact_case_sensitive_names(self) -> None:
        report = _scope(
            ["read_file", "Read_File", "read_file ", "read", "search", "write_file"], ["read_file", "search"]
        )
        self.assertEqual(
            [(f.index, f.kind, f.tool, f.related_index) for f in report.findings],
            [
                (1, "permission-overreach", "Read_File", None),
                (2, "permission-overreach", "read_file ", None),
                (3, "permission-overreach", "read", None),
                (5, "permission-overreach", "write_file", None),
            ],
        )
        self.assertEqual((report.agent, report.calls), ("reader", 6))

    def test_every_call_reported_not_only_the_first(self) -> None:
        report = _scope(["rm", "ls", "rm"], ["ls"], agent="a'b")
        self.assertEqual(
            scope_text(report),
            (
                "calls: 3\nfindings: 2\n"
                "index 0: permission-overreach: tool 'rm' is not in the declared scope for agent 'a'b'\n"
                "index 2: permission-overreach: tool 'rm' is not in the declared scope for agent 'a'b'\n"
            ),
        )

    def test_clean_and_empty(self) -> None:
        self.assertEqual(scope_text(_scope(["ls", "ls"], ["ls"])), "calls: 2\nfindings: 0\n")
        self.assertEqual(scope_text(_scope([], [])), "calls: 0\nfindings: 0\n")

    def test_samples(self) -> None:
        policy = load_policy(os.path.join(ROOT, "samples", "scope.json"))
        self.assertEqual(policy, Policy("docs-reader", frozenset({"read_file", "list_dir", "search"})))
        with open(os.path.join(ROOT, "samples", "session-dirty.jsonl"), "rb") as handle:
            report = audit_scope(read_session(handle, "x"), policy)
        self.assertEqual(
            scope_text(report),
            (
                "calls: 6\nfindings: 1\n"
                "index 4: permission-overreach: tool 'write_file' is not in the declared scope "
                "for agent 'docs-reader'\n"
            ),
        )


# (name, file text, exact message after "PATH")
BAD_SCOPE_FILES = [
    ("not json", "{", ":1: invalid JSON: Expecting property name enclosed in double quotes (column 2)"),
    (
        "invalid JSON on line 3",
        '{\n"agent": "a",\n"allowed_tools" []}',
        ":3: invalid JSON: Expecting ':' delimiter (column 17)",
    ),
    ("empty", "", ":1: invalid JSON: Expecting value (column 1)"),
    ("array", '["read_file"]', ": permission file must hold one JSON object"),
    ("missing agent", '{"allowed_tools": ["t"]}', ': missing field "agent"'),
    ("missing allowed_tools", '{"agent": "a"}', ': missing field "allowed_tools"'),
    ("extra field", '{"agent": "a", "allowed_tools": [], "x": 1}', ': unknown field "x"'),
    ("agent not string", '{"agent": 1, "allowed_tools": []}', ': field "agent" must be a string'),
    (
        "tools not list",
        '{"agent": "a", "allowed_tools": "t"}',
        ': field "allowed_tools" must be an array of strings',
    ),
    (
        "non-string tool",
        '{"agent": "a", "allowed_tools": ["t", 1]}',
        ': field "allowed_tools" item 1 must be a string, not 1',
    ),
    (
        "null tool",
        '{"agent": "a", "allowed_tools": [null]}',
        ': field "allowed_tools" item 0 must be a string, not null',
    ),
    ("duplicate key", '{"agent": "a", "agent": "b", "allowed_tools": []}', ': duplicate key "agent"'),
    (
        "NaN",
        '{"agent": "a", "allowed_tools": [], "limits": {"max_seconds": NaN}}',
        ": NaN is not allowed in JSON",
    ),
    (
        "write_tools not list",
        '{"agent": "a", "allowed_tools": [], "write_tools": {}}',
        ': field "write_tools" must be an array of strings',
    ),
    (
        "limits not object",
        '{"agent": "a", "allowed_tools": [], "limits": 5}',
        ': field "limits" must be an object',
    ),
    (
        "unknown limit",
        '{"agent": "a", "allowed_tools": [], "limits": {"max_tokens": 5}}',
        ': unknown field "max_tokens" in "limits" (known: max_steps, max_result_bytes, max_seconds)',
    ),
    (
        "boolean limit",
        '{"agent": "a", "allowed_tools": [], "limits": {"max_steps": true}}',
        ': limit "max_steps" must be a positive integer',
    ),
    (
        "fractional steps",
        '{"agent": "a", "allowed_tools": [], "limits": {"max_steps": 1.5}}',
        ': limit "max_steps" must be a positive integer',
    ),
    (
        "zero bytes",
        '{"agent": "a", "allowed_tools": [], "limits": {"max_result_bytes": 0}}',
        ': limit "max_result_bytes" must be a positive integer',
    ),
    (
        "negative seconds",
        '{"agent": "a", "allowed_tools": [], "limits": {"max_seconds": -1}}',
        ': limit "max_seconds" must be a positive number',
    ),
    ("two objects", '{"agent": "a", "allowed_tools": []}\n{}', ":2: invalid JSON: Extra data (column 1)"),
]


class LoadPolicyTest(unittest.TestCase):
    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.path = os.path.join(self._tmp.name, "scope.json")

    def load(self, data: str | bytes) -> Policy:
        with open(self.path, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
        return load_policy(self.path)

    def test_rejects(self) -> None:
        for name, text, message in BAD_SCOPE_FILES:
            with self.subTest(name):
                with self.assertRaises(InputError) as caught:
                    self.load(text)
                self.assertEqual(str(caught.exception), self.path + message)

    def test_invalid_utf8(self) -> None:
        with self.assertRaises(InputError) as caught:
            self.load(b'{"agent": "\xff", "allowed_tools": []}')
        self.assertEqual(str(caught.exception), f"{self.path}: not valid UTF-8")

    def test_missing_file(self) -> None:
        missing = os.path.join(self._tmp.name, "none.json")
        with self.assertRaises(UsageError) as caught:
            load_policy(missing)
        self.assertEqual(str(caught.exception), f"cannot read {missing}: No such file or directory")

    def test_extra_optional_fields_accepted(self) -> None:
        policy = self.load(
            '{"agent": "support", "allowed_tools": ["get_order", "cancel_order", "get_order"],\n'
            ' "write_tools": ["cancel_order"],\n'
            ' "limits": {"max_steps": 20, "max_result_bytes": 100000, "max_seconds": 60}}\n'
        )
        self.assertEqual(
            policy,
            Policy(
                "support",
                frozenset({"get_order", "cancel_order"}),
                frozenset({"cancel_order"}),
                Limits(20, 100000, 60.0),
            ),
        )
        self.assertIsInstance(policy.limits.max_seconds, float)

    def test_partial_limits(self) -> None:
        self.assertEqual(
            self.load('{"agent": "a", "allowed_tools": [], "limits": {"max_seconds": 0.5}}').limits,
            Limits(None, None, 0.5),
        )
        self.assertEqual(self.load('{"agent": "a", "allowed_tools": [], "limits": {}}').limits, Limits())

    def test_parse_policy_direct(self) -> None:
        obj: Any = {"agent": "a", "allowed_tools": ["x"]}
        self.assertEqual(parse_policy(obj), Policy("a", frozenset({"x"})))
        with self.assertRaises(ValueError) as caught:
            parse_policy(None)
        self.assertEqual(str(caught.exception), "permission file must hold one JSON object")


if __name__ == "__main__":
    unittest.main()
