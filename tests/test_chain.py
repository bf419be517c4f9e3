"""The hash chain (SPEC.md §6): seal, verify, and every way of tampering with a sealed file."""

from __future__ import annotations

import hashlib
import io
import json
import os
import unittest
from typing import Any

from toolreplay.audit.chain import (
    GENESIS,
    ChainReport,
    format_link,
    link_digest,
    link_line,
    seal_records,
    verify_chain,
)
from toolreplay.audit.render import chain_text, replay_text
from toolreplay.audit.replay import audit_replay
from toolreplay.audit.scope import audit_scope
from toolreplay.errors import InputError
from toolreplay.format.canonical import canonical_json
from toolreplay.format.records import read_links, read_session
from toolreplay.policy.model import load_policy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRTY = os.path.join(ROOT, "samples", "session-dirty.jsonl")


def _sealed_lines() -> list[str]:
    with open(DIRTY, "rb") as handle:
        return [line.decode() for line in seal_records(read_session(handle, "x"))]


def _verify(lines: list[str]) -> ChainReport:
    return verify_chain(read_links(io.BytesIO("".join(lines).encode()), "sealed"))


def _expected_digest(prev: str, link: dict[str, Any]) -> str:
    """An independent recomputation: SHA-256(prev ++ canonical_json of the four-field record)."""
    record = {key: link[key] for key in ("index", "tool", "args", "response")}
    return hashlib.sha256((prev + canonical_json(record)).encode()).hexdigest()


def _edit(line: str, **changes: Any) -> str:
    link = json.loads(line)
    link.update(changes)
    return json.dumps(link) + "\n"


class SealTest(unittest.TestCase):
    def test_links(self) -> None:
        lines = _sealed_lines()
        links = [json.loads(line) for line in lines]
        self.assertEqual(len(links), 6)
        prev = GENESIS
        for line, link in zip(lines, links, strict=True):
            self.assertEqual(list(link), ["index", "tool", "args", "response", "prev", "digest"])
            self.assertEqual(link["prev"], prev)
            self.assertEqual(link["digest"], _expected_digest(prev, link))
            self.assertEqual(
                line,
                (
                    f'{{"index":{link["index"]},"tool":{canonical_json(link["tool"])},'
                    f'"args":{canonical_json(link["args"])},"response":{canonical_json(link["response"])},'
                    f'"prev":"{prev}","digest":"{link["digest"]}"}}\n'
                ),
            )
            prev = link["digest"]

    def test_format_link_bytes(self) -> None:
        (record,) = read_session(
            io.BytesIO('{"index": 0, "tool": "t", "args": {"b": 1.0, "a": "é"}, "response": {}}\n'.encode()),
            "x",
        )
        digest = link_digest(GENESIS, record.canonical_record)
        self.assertEqual(
            digest,
            hashlib.sha256(
                (GENESIS + '{"args":{"a":"é","b":1},"index":0,"response":{},"tool":"t"}').encode()
            ).hexdigest(),
        )
        self.assertEqual(
            format_link(record, GENESIS, digest),
            (
                f'{{"index":0,"tool":"t","args":{{"a":"é","b":1}},"response":{{}},"prev":"{GENESIS}",'
                f'"digest":"{digest}"}}\n'
            ).encode(),
        )

    def test_seal_writes_the_guards_link_lines(self) -> None:
        # `seal` builds its lines itself (one join a line); the guard's recorder uses `link_line`: the same bytes.
        lines = ['{"index": 0, "tool": "t", "args": {"b": 1.0, "a": "é"}, "response": {"x": [1, "😀"]}}',
                 '{"index": 1, "tool": "w", "args": {}, "response": {}, "meta": {"turn": 2, "outcome": "ran"}}',
                 '{"index": 2, "tool": "t", "args": {"q": "a:b"}, "response": {"ok": true}}']
        records = list(read_session(io.BytesIO(("\n".join(lines) + "\n").encode()), "x"))
        prev = GENESIS
        expected = []
        for record in records:
            line, prev = link_line(record.index, record.canonical_tool, record.canonical_args,
                                   record.canonical_response, prev, record.canonical_meta)
            expected.append(line)
        self.assertEqual(list(seal_records(records)), expected)
        self.assertEqual(json.loads(expected[1])["meta"], {"turn": 2, "outcome": "ran"})
        self.assertTrue(verify_chain(read_links(io.BytesIO(b"".join(expected)), "s")).intact)

    def test_seal_continues_from_prev(self) -> None:
        with open(DIRTY, "rb") as handle:
            records = list(read_session(handle, "x"))
        whole = list(seal_records(records))
        tail_prev = json.loads(whole[2])["digest"]
        self.assertEqual(list(seal_records(records[3:], prev=tail_prev)), whole[3:])

    def test_genesis(self) -> None:
        self.assertEqual(GENESIS, "0" * 64)


class VerifyTest(unittest.TestCase):
    def setUp(self) -> None:
        self.lines = _sealed_lines()
        self.links = [json.loads(line) for line in self.lines]
        self.digests = [link["digest"] for link in self.links]

    def assert_broken(self, lines: list[str], position: int, field: str, expected: str, found: str) -> None:
        report = _verify(lines)
        self.assertEqual(
            (report.broken_at, report.field, report.expected, report.found, report.links),
            (position, field, expected, found, position + 1),
        )
        self.assertFalse(report.intact)
        self.assertEqual(
            chain_text(report),
            f"chain: broken\nfirst broken link: index {position}\nexpected: {expected}\nfound: {found}\n",
        )

    def test_intact(self) -> None:
        report = _verify(self.lines)
        self.assertEqual((report.intact, report.links, report.broken_at), (True, 6, None))
        self.assertEqual(chain_text(report), "chain: intact\n")

    def test_empty_file_is_intact(self) -> None:
        self.assertEqual(_verify([]), ChainReport(0))

    def test_edit_response(self) -> None:
        lines = list(self.lines)
        lines[3] = _edit(lines[3], response={"count": 99})
        self.assert_broken(
            lines, 3, "digest", _expected_digest(self.digests[2], json.loads(lines[3])), self.digests[3]
        )

    def test_edit_tool_and_args(self) -> None:
        for field, value in (("tool", "search2"), ("args", {"query": "install", "limit": 11})):
            with self.subTest(field):
                lines = list(self.lines)
                lines[3] = _edit(lines[3], **{field: value})
                self.assert_broken(
                    lines,
                    3,
                    "digest",
                    _expected_digest(self.digests[2], json.loads(lines[3])),
                    self.digests[3],
                )

    def test_reorder(self) -> None:
        lines = list(self.lines)
        lines[2], lines[3] = lines[3], lines[2]
        self.assert_broken(lines, 2, "prev", self.digests[1], self.digests[2])

    def test_delete_middle(self) -> None:
        self.assert_broken(self.lines[:2] + self.lines[3:], 2, "prev", self.digests[1], self.digests[2])

    def test_delete_first(self) -> None:
        self.assert_broken(self.lines[1:], 0, "prev", GENESIS, self.digests[0])

    def test_insert_well_formed_link(self) -> None:
        extra = {
            "index": 2,
            "tool": "read_file",
            "args": {"path": "x"},
            "response": {},
            "prev": self.digests[1],
        }
        extra["digest"] = _expected_digest(self.digests[1], extra)
        lines = self.lines[:2] + [json.dumps(extra) + "\n"] + self.lines[2:]
        self.assert_broken(lines, 3, "prev", extra["digest"], self.digests[1])

    def test_insert_copy_of_a_link(self) -> None:
        lines = self.lines[:3] + [self.lines[1]] + self.lines[3:]
        self.assert_broken(lines, 3, "prev", self.digests[2], self.digests[0])

    def test_renumber(self) -> None:
        lines = list(self.lines)
        lines[4] = _edit(lines[4], index=7)
        self.assert_broken(
            lines, 4, "digest", _expected_digest(self.digests[3], json.loads(lines[4])), self.digests[4]
        )

    def test_prev_only_edit(self) -> None:
        lines = list(self.lines)
        lines[3] = _edit(lines[3], prev="f" * 64)
        self.assert_broken(lines, 3, "prev", self.digests[2], "f" * 64)

    def test_first_prev_edit(self) -> None:
        lines = list(self.lines)
        lines[0] = _edit(lines[0], prev="1" + "0" * 63)
        self.assert_broken(lines, 0, "prev", GENESIS, "1" + "0" * 63)

    def test_digest_only_edit_of_last_link(self) -> None:
        lines = list(self.lines)
        lines[5] = _edit(lines[5], digest="0" * 64)
        self.assert_broken(lines, 5, "digest", self.digests[5], "0" * 64)

    def test_edit_and_reseal_one_link_breaks_the_next(self) -> None:
        lines = list(self.lines)
        forged = json.loads(_edit(lines[3], response={"count": 99}))
        forged["digest"] = _expected_digest(self.digests[2], forged)
        lines[3] = json.dumps(forged) + "\n"
        self.assert_broken(lines, 4, "prev", forged["digest"], self.digests[3])

    def test_truncating_the_end_is_not_visible(self) -> None:
        self.assertTrue(_verify(self.lines[:4]).intact)  # the documented limit of SPEC.md §6

    def test_white_space_key_order_and_number_spelling_do_not_matter(self) -> None:
        respelled = []
        for position, link in enumerate(self.links):
            text = json.dumps(
                dict(reversed(list(link.items()))),
                indent=None,
                separators=(" ,  ", " : "),
                ensure_ascii=position % 2 == 0,
            )
            respelled.append(text.replace('"limit" : 10', '"limit" : 1.0e1') + "\r\n\n")
        self.assertIn("1.0e1", "".join(respelled))
        self.assertTrue(_verify(respelled).intact)

    def test_verify_rejects_plain_records_and_bad_hex(self) -> None:
        with open(DIRTY, encoding="utf-8") as handle:
            plain = handle.readlines()
        for lines, message in [
            (
                self.lines[:2] + plain[2:3],
                "sealed:3: plain record in a sealed file (every line must be a link with prev and digest)",
            ),
            (
                [_edit(self.lines[0], digest="A" * 64)],
                'sealed:1: field "digest" must be 64 lower-case hex characters',
            ),
            ([_edit(self.lines[0], extra=1)], 'sealed:1: unknown field "extra"'),
        ]:
            with self.subTest(message):
                with self.assertRaises(InputError) as caught:
                    _verify(lines)
                self.assertEqual(str(caught.exception), message)


class SealedIsASessionTest(unittest.TestCase):
    def test_replay_and_scope_accept_sealed_file(self) -> None:
        sealed = "".join(_sealed_lines()).encode()
        with open(DIRTY, "rb") as handle:
            plain = handle.read()
        for data in (plain, sealed):
            report = audit_replay(read_session(io.BytesIO(data), "x"))
            self.assertEqual(
                replay_text(report),
                (
                    "calls: 6\ndivergence: index 5\nfindings: 2\n"
                    "index 2: redundant-call: tool 'read_file' repeats the identical call at index 1 "
                    "with no state change between them\n"
                    "index 5: non-determinism: tool 'search' returned a different response "
                    "than the identical call at index 3\n"
                ),
            )
            policy = load_policy(os.path.join(ROOT, "samples", "scope.json"))
            self.assertEqual(
                [f.index for f in audit_scope(read_session(io.BytesIO(data), "x"), policy).findings], [4]
            )

    def test_resealing_a_sealed_file_gives_the_same_chain(self) -> None:
        lines = _sealed_lines()
        resealed = [
            line.decode() for line in seal_records(read_session(io.BytesIO("".join(lines).encode()), "x"))
        ]
        self.assertEqual(resealed, lines)


if __name__ == "__main__":
    unittest.main()
