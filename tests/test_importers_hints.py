"""`import --mutators-out`: a mutators file from a log's MCP tool annotations."""

from __future__ import annotations

import io
import os
import tempfile
import unittest

from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.importers.hints import ToolHint, hints_mutators_text, read_tool_hints

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANNOTATED = os.path.join(ROOT, "samples", "mcp-annotated.jsonl")
HEADER = ("# Mutators from the log's MCP tool annotations (readOnlyHint, destructiveHint), for review.\n"
          "# A hint only feeds replay's state model; it grants nothing.\n")


class HintsTest(unittest.TestCase):
    def test_read_tool_hints(self) -> None:
        with open(ANNOTATED, "rb") as handle:
            hints = read_tool_hints(handle)
        self.assertEqual(hints, [ToolHint("delete_note", None, True, True), ToolHint("read_file", True, None, True),
                                 ToolHint("search", None, None, False), ToolHint("write_note", False, False, True)])
        self.assertEqual(hints_mutators_text(hints), HEADER + (
            "delete_note  # readOnlyHint: false, destructiveHint: true\n"
            "# read_file  # readOnlyHint: true (reads)\n"
            "# search  # no annotations: decide by hand\n"
            "write_note  # readOnlyHint: false, destructiveHint: false\n"))

    def test_defaults_and_no_tools(self) -> None:
        hints = read_tool_hints(io.BytesIO(b'{"result":\n {"tools": [{"name": "x", "inputSchema": {}, '
                                           b'"annotations": {}}]}}'))
        self.assertEqual(hints_mutators_text(hints), HEADER + "x  # readOnlyHint: false, destructiveHint: true "
                                                              "(by default)\n")
        self.assertEqual(hints_mutators_text(read_tool_hints(io.BytesIO(b"[]"))),
                         HEADER + "# The log lists no tools (no MCP tools/list result).\n")

    def test_import_writes_the_file_beside_the_session(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            session, mutators = os.path.join(folder, "s.jsonl"), os.path.join(folder, "m.txt")
            streams = IO.memory()
            self.assertEqual(main(["import", "mcp", ANNOTATED, "-o", session, "--mutators-out", mutators],
                                  streams), 0)
            with open(mutators, encoding="utf-8") as handle:
                self.assertTrue(handle.read().startswith(HEADER + "delete_note"))
            streams = IO.memory()
            self.assertEqual(main(["replay", "--state-aware", "--mutators", mutators, session], streams), 0)
            self.assertEqual(streams.out().splitlines()[-1], "index 2: changed-after-write: tool 'read_file' returned a "
                             "different response than the identical call at index 0 after the state-changing call "
                             "at index 1")


if __name__ == "__main__":
    unittest.main()
