"""`toolreplay mutators`: candidate mutators from names and effects, printed for review."""

from __future__ import annotations

import io
import os
import unittest
from typing import Any

from toolreplay.audit.mutators import MutatorEvidence, collect_evidence, propose_mutators, write_verb
from toolreplay.audit.replay import state_fact
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.format.records import format_record, read_session

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CODING = os.path.join(ROOT, "samples", "coding-agent.jsonl")

HEADER = (
    "# {count} candidate mutators from 1 session. Review: keep the tools that change state,\n"
    "# delete the others, save the file and pass it to `toolreplay replay --state-aware --mutators FILE`.\n"
    "# name: the write verb in the tool's name; after it: identical calls that returned a different\n"
    "# response / the same response when this tool ran between them.\n"
)


def run(*argv: str) -> tuple[int, str, str]:
    io_ = IO.memory()
    code = main(list(argv), io_)
    return code, io_.out(), io_.err()


class WriteVerbTest(unittest.TestCase):
    def test_names(self) -> None:
        for name, verb in (("user:toggle_roaming", "toggle"), ("toggle_roaming", "toggle"), ("bash", "bash"),
                           ("edit", "edit"), ("str_replace_editor", "replace"), ("createIssue", "create"),
                           ("set_apn_settings", "set"), ("update_reservation_flights", "update"),
                           ("get_order_details", None), ("check_installed_apps", None), ("can_send_mms", None),
                           ("user:check_sim_status", None), ("settings", None), ("open", None),
                           ("search_dir", None), ("run_speed_test", "run"), ("DELETE", "delete")):
            self.assertEqual(write_verb(name), verb, name)


def _evidence(*calls: tuple[Any, ...]) -> MutatorEvidence:
    """Evidence from (tool, args, response) or (tool, args, response, meta) calls."""
    data = "".join(format_record(i, *call) + "\n" for i, call in enumerate(calls)).encode()
    evidence = MutatorEvidence()
    collect_evidence(map(state_fact, read_session(io.BytesIO(data), "s")), evidence)
    return evidence


class ProposeTest(unittest.TestCase):
    def test_a_tool_after_which_reads_change_is_proposed_without_a_verb(self) -> None:
        read = ("status", {}, {"on": False})
        flip = ("roam", {}, {"text": "done"})
        evidence = _evidence(read, flip, ("status", {}, {"on": True}), flip, ("status", {}, {"on": False}))
        self.assertEqual([(c.tool, c.verb, c.changed, c.unchanged) for c in propose_mutators(evidence)],
                         [("roam", None, 2, 0)])

    def test_a_change_is_credited_to_the_named_writer_not_the_reads_between(self) -> None:
        evidence = _evidence(("get", {}, {"v": 1}), ("lookup", {}, {}), ("set_v", {}, {}), ("get", {}, {"v": 2}))
        self.assertEqual((evidence.changed, evidence.calls["lookup"]), ({"set_v": 1}, 1))

    def test_a_retry_after_an_error_is_no_evidence(self) -> None:
        evidence = _evidence(("get", {}, {"text": "Error: 503"}), ("ping", {}, {}), ("get", {}, {"v": 1}),
                             ("ping", {}, {}), ("get", {}, {"v": 1}))
        self.assertEqual((evidence.changed, evidence.unchanged), ({}, {"get": 1, "ping": 1}))

    def test_known_mutators_are_left_out(self) -> None:
        evidence = _evidence(("set_a", {}, {}), ("set_b", {}, {}))
        self.assertEqual([c.tool for c in propose_mutators(evidence, {"set_a"})], ["set_b"])

    def test_tools_the_records_declare_are_left_out_and_explain_a_change(self) -> None:
        # `roam` has no write verb, `set_a` one: the records say both change state (meta.mutates), so neither
        # is proposed, even from a refused call; a change after `roam` is not credited to `lookup` beside it
        declared = {"outcome": "ran", "mutates": True}
        evidence = _evidence(("status", {}, {"on": False}), ("lookup", {}, {}), ("roam", {}, {}, declared),
                             ("status", {}, {"on": True}), ("set_a", {}, {"error": "no"}, {"outcome": "refused",
                                                                                          "mutates": True}),
                             ("set_b", {}, {}))
        self.assertEqual((evidence.changed, evidence.declared), ({"roam": 1}, {"roam", "set_a"}))
        self.assertEqual([c.tool for c in propose_mutators(evidence)], ["set_b"])
        undeclared = _evidence(("status", {}, {"on": False}), ("lookup", {}, {}), ("roam", {}, {}),
                               ("status", {}, {"on": True}))
        self.assertEqual(undeclared.changed, {"lookup": 1, "roam": 1})


class CommandTest(unittest.TestCase):
    def test_coding_agent_session(self) -> None:
        self.assertEqual(run("mutators", CODING), (0, HEADER.format(count=4) + (
            "bash  # name: bash; after it: 1 different, 0 same; calls: 6\n"
            "create  # name: create; after it: 0 different, 0 same; calls: 1\n"
            "edit  # name: edit; after it: 2 different, 0 same; calls: 2\n"
            "submit  # name: submit; after it: 0 different, 0 same; calls: 1\n"), ""))

    def test_an_imported_swe_agent_trajectory(self) -> None:
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            session = os.path.join(folder, "s.jsonl")
            self.assertEqual(run("import", "swe-agent", os.path.join(ROOT, "samples", "import", "swe-agent.traj"),
                                 "-o", session)[0], 0)
            code, out, _ = run("mutators", session)
        self.assertEqual([line.split()[0] for line in out.splitlines() if not line.startswith("#")],
                         ["bash", "str_replace_editor", "submit"])

    def test_the_proposal_is_a_mutators_file(self) -> None:
        import tempfile

        code, proposal, _ = run("mutators", CODING)
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as handle:
            handle.write(proposal)
        self.addCleanup(os.unlink, handle.name)
        code, out, _ = run("replay", "--state-aware", "--mutators", handle.name, CODING)
        self.assertEqual(out.splitlines()[:4], ["calls: 13", "divergence: none", "findings: 1", "information: 3"])

    def test_hostile_names_are_escaped_and_commented_out(self) -> None:
        import tempfile

        data = (format_record(0, "set\x1b[2Jx y", {}, {}) + "\n").encode()
        with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", delete=False) as handle:
            handle.write(data)
        self.addCleanup(os.unlink, handle.name)
        code, out, _ = run("mutators", handle.name)
        self.assertEqual(out.splitlines()[-1], "# (not a valid name line) set\\x1b[2Jx y  # name: set; after it: "
                                               "0 different, 0 same; calls: 1")

    def test_a_guarded_session_proposes_only_what_its_record_does_not_declare(self) -> None:
        import tempfile

        ran = {"outcome": "ran"}
        data = "".join(format_record(i, *call) + "\n" for i, call in enumerate((
            ("read_file", {"path": "a"}, {"text": "1"}, ran),
            ("edit_file", {"path": "a"}, {"ok": True}, {"outcome": "ran", "mutates": True}),
            ("read_file", {"path": "a"}, {"text": "2"}, ran),
            ("send_mail", {"to": "b"}, {"ok": True}, ran)))).encode()
        with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", delete=False) as handle:
            handle.write(data)
        self.addCleanup(os.unlink, handle.name)
        self.assertEqual(run("mutators", handle.name), (0, HEADER.format(count=1) + (
            "send_mail  # name: send; after it: 0 different, 0 same; calls: 1\n"), ""))

    def test_a_bad_session_is_an_input_error(self) -> None:
        self.assertEqual(run("mutators", os.path.join(ROOT, "samples", "scope.json"))[0], 2)


if __name__ == "__main__":
    unittest.main()
