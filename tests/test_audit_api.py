"""The public audit API of `toolreplay.audit`: each command is one call into it, with the CLI's results."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import unittest

import toolreplay.audit
from toolreplay.audit import (
    SessionOptions,
    audit_many,
    counts,
    mutator_set,
    replay_session,
    scope_session,
    seal_session,
    verify_session,
)
from toolreplay.audit.fleet_render import iter_fleet_text
from toolreplay.audit.render import chain_text, replay_text, scope_text
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.policy import load_policy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRTY = os.path.join(ROOT, "samples", "session-dirty.jsonl")
SCOPE = os.path.join(ROOT, "samples", "scope.json")


def run(*argv: str) -> tuple[int, str]:
    streams = IO.memory()
    code = main(list(argv), streams)
    return code, streams.out()


class ApiTest(unittest.TestCase):
    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.tmp = self._tmp.name

    def test_replay_and_scope_are_what_the_commands_print(self) -> None:
        self.assertEqual(replay_text(replay_session(DIRTY)), run("replay", DIRTY)[1])
        self.assertEqual(replay_text(replay_session(DIRTY, state_aware=True)), run("replay", DIRTY, "--state-aware")[1])
        self.assertEqual(scope_text(scope_session(DIRTY, load_policy(SCOPE))), run("scope", DIRTY, SCOPE)[1])

    def test_replay_reads_standard_input_from_the_stream_given(self) -> None:
        with open(DIRTY, "rb") as handle:
            data = handle.read()
        self.assertEqual(replay_text(replay_session("-", stdin=io.BytesIO(data))), run("replay", DIRTY)[1])

    def test_seal_then_verify(self) -> None:
        chain = seal_session(DIRTY)
        lines = b"".join(chain)
        self.assertEqual((chain.count, chain.checkpoint()), (6, None))
        sealed = os.path.join(self.tmp, "sealed.jsonl")
        with open(sealed, "wb") as handle:
            handle.write(lines)
        self.assertEqual(lines.decode("utf-8"), run("seal", DIRTY)[1])
        result = verify_session(sealed)
        self.assertEqual((result.ok, result.torn), (True, None))
        self.assertEqual(chain_text(result.chain), run("verify", sealed)[1])
        with open(sealed, "ab") as handle:
            handle.write(b'{"index": 6, "tool": "t"')  # a last line torn by a crash
        result = verify_session(sealed)
        self.assertEqual((result.ok, result.chain.intact, result.torn), (False, True, 24))

    def test_audit_many_is_the_audit_command(self) -> None:
        fleet = os.path.join(self.tmp, "fleet")
        os.makedirs(fleet)
        shutil.copy(DIRTY, fleet)
        fleet_run = audit_many([fleet], SessionOptions(), top=10)
        text = "".join(iter_fleet_text(fleet_run.results, fleet_run.summary))
        self.assertEqual(text, run("audit", fleet)[1])
        self.assertEqual((fleet_run.summary.sessions, fleet_run.summary.findings), (1, 2))

    def test_mutator_set_and_counts(self) -> None:
        path = os.path.join(self.tmp, "mutators.txt")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("book  # a comment\n\ncancel\n")
        self.assertEqual(mutator_set(["refund"], [path]) - mutator_set(), {"book", "cancel", "refund"})
        self.assertEqual((counts("redundant-call"), counts("changed-after-write"),
                          counts("changed-after-write", count_changes=True)), (True, False, True))

    def test_every_public_name_resolves_and_others_do_not(self) -> None:
        for name in toolreplay.audit.__all__:
            self.assertIsNotNone(getattr(toolreplay.audit, name), name)
        with self.assertRaises(AttributeError):
            toolreplay.audit.no_such_name  # noqa: B018


if __name__ == "__main__":
    unittest.main()
