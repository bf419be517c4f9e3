"""From logs to a regression suite: requests and answers per format, `import --suite`, the recorded agent."""

from __future__ import annotations

import io
import json
import os
import tempfile
import unittest
from typing import Any

from tests.support import integration
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.evaluation import Answer, Conversation, NamedAgent, ToolCall, evaluate, load_suite
from toolreplay.evaluation.recorded import recorded_agent
from toolreplay.importers import Transcript, import_file, import_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples", "import")
RECORDED = "toolreplay.evaluation.recorded:recorded_agent"
RAW = os.path.join(ROOT, "..", "shared", "corpus", "raw")


def transcripts_of(data: bytes | str, fmt: str = "auto") -> list[Transcript]:
    """The transcripts of a log given as bytes, or as the name of a shipped sample."""
    found: list[Transcript] = []
    if isinstance(data, str):
        with open(os.path.join(SAMPLES, data), "rb") as handle:
            import_file(handle, fmt, data, found)
    else:
        import_file(io.BytesIO(data), fmt, "log.json", found)
    return found


def jsonl(*lines: Any) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


GEMINI = json.dumps({"contents": [
    {"role": "user", "parts": [{"text": "Lights on, music on."}]},
    {"role": "model", "parts": [{"text": "thinking...", "thought": True},
                                {"functionCall": {"name": "lights", "args": {"on": True}}},
                                {"functionCall": {"name": "music", "args": {"loud": True}}}]},
    {"role": "user", "parts": [{"functionResponse": {"name": "music", "response": {"ok": True}}},
                               {"functionResponse": {"name": "lights", "response": {"ok": True}}}]},
    {"role": "model", "parts": [{"text": "Both are on."}]},
]}).encode()
ANTHROPIC = json.dumps({"messages": [
    {"role": "user", "content": [{"type": "text", "text": "Read a.txt"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "Reading."},
                                      {"type": "tool_use", "id": "t1", "name": "read", "input": {"p": "a.txt"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "hello"}]},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "easy"}, {"type": "text", "text": "It says hello."}]},
]}).encode()
CLAUDE_CODE = jsonl(
    {"type": "system", "subtype": "init", "session_id": "s"},
    {"type": "user", "isMeta": True, "message": {"role": "user", "content": "Caveat: local commands"},
     "session_id": "s"},
    {"type": "user", "message": {"role": "user", "content": "List the files"}, "session_id": "s"},
    {"type": "assistant", "message": {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]}, "session_id": "s"},
    {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "a b"}]}, "session_id": "s"},
    {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "a and b."}]},
     "session_id": "s"},
    {"type": "result", "subtype": "success", "result": "Two files: a and b.", "session_id": "s"},
)
TAU2 = json.dumps({"simulations": [{"messages": [
    {"role": "assistant", "content": "Hi! How can I help?"},
    {"role": "user", "content": "Cancel reservation R1."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "name": "get", "arguments": {"id": "R1"}, "requestor": "assistant"}]},
    {"role": "tool", "id": "c1", "content": "{\"id\": \"R1\"}", "requestor": "assistant", "error": False},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c2", "name": "cancel", "arguments": {"id": "R1"}, "requestor": "assistant"}]},
    {"role": "tool", "id": "c2", "content": "ok", "requestor": "assistant", "error": False},
    {"role": "assistant", "content": "R1 is cancelled."},
    {"role": "user", "content": "Thanks! ###STOP###"},
]}]}).encode()
RESPONSES_STREAM = jsonl(  # one item per line: read as a stream
    {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris and Rome?"}]},
    {"type": "function_call", "call_id": "a", "name": "weather", "arguments": "{\"city\": \"Paris\"}"},
    {"type": "function_call", "call_id": "b", "name": "weather", "arguments": "{\"city\": \"Rome\"}"},
    {"type": "function_call_output", "call_id": "b", "output": "sun"},
    {"type": "function_call_output", "call_id": "a", "output": "rain"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Rain, and sun."}]},
)

# (log, format, [(request, answer, turns)] per conversation)
# OpenHands V0 events and the agent SDK's (`source` says who speaks), as in tests/fixtures/import/openhands.
OPENHANDS_V0 = json.dumps([
    {"id": 0, "source": "user", "message": "Rename a.py", "action": "message", "args": {"content": "Rename a.py"}},
    {"id": 1, "source": "agent", "message": "Running mv", "action": "run", "args": {"command": "mv a.py b.py"},
     "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "t1", "model_response": {"id": "r1"}}},
    {"id": 2, "source": "agent", "message": "Command ran", "cause": 1, "observation": "run", "content": ""},
    {"id": 3, "source": "agent", "message": "Renamed.", "action": "message", "args": {"content": "Renamed."}}]).encode()
OPENHANDS_SDK = jsonl(
    {"id": "m0", "source": "user", "kind": "MessageEvent", "llm_message": {"role": "user", "content": [
        {"type": "text", "text": "List files"}]}},
    {"id": "a1", "source": "agent", "kind": "ActionEvent", "tool_name": "terminal", "tool_call_id": "c1",
     "action": {"command": "ls", "kind": "TerminalAction"}, "llm_response_id": "r1"},
    {"id": "o1", "source": "environment", "kind": "ObservationEvent", "tool_call_id": "c1",
     "observation": {"content": [{"type": "text", "text": "a.txt"}]}},
    {"id": "m1", "source": "agent", "kind": "MessageEvent", "llm_response_id": "r2", "llm_message": {
        "role": "assistant", "content": [{"type": "text", "text": "One file: a.txt."}]}})
TRANSCRIPTS: list[tuple[bytes | str, str, list[tuple[str | None, str | None, tuple[int, ...]]]]] = [
    ("atif.json", "atif", [("What is the current trading price of Alphabet (GOOGL)?", "As of October 11, 2025, "
                            "Alphabet (GOOGL) is trading at $185.35 with a volume of 1.5M shares traded.", (0, 0))]),
    # the real trajectory ends in the `finish` call: no answer after it
    ("openhands.json", "openhands", [("Please rename game_2048.py to 2048.py", None, (0, 1, 2, 3))]),
    (OPENHANDS_V0, "openhands", [("Rename a.py", "Renamed.", (0,))]),
    (OPENHANDS_SDK, "openhands", [("List files", "One file: a.txt.", (0,))]),
    ("openai-chat.json", "openai-chat",
     [("Where is order 1042, and what else did I buy?", "Order 1042 has shipped.", (0, 0))]),
    ("openai-responses.json", "openai-responses", [("What's the weather in Paris?", "14 C and light rain.", (0,))]),
    ("inspect-ai.json", "inspect-ai", [("What is 1 + 2?", "3", (0, 1)), ("What is 20 + 22?", "42", (0,))]),
    # the text beside the last tool call is not an answer: it comes before the call's result
    ("anthropic.json", "anthropic", [("Read notes.txt and delete tmp.log.", None, (0, 0))]),
    ("swe-agent.traj", "swe-agent", [("Fix the failing test.", None, (0, 1, 2))]),
    ("mcp.jsonl", "mcp", [(None, None, (0, 1, 2))]),  # no role messages: no request
    ("otel.json", "otel", [(None, None, (0, 1, 2))]),
    ("openai-agents.jsonl", "openai-agents", [(None, None, (0, 1))]),
    (GEMINI, "gemini", [("Lights on, music on.", "Both are on.", (0, 0))]),
    (ANTHROPIC, "anthropic", [("Read a.txt", "It says hello.", (0,))]),
    (CLAUDE_CODE, "claude-code", [("List the files", "Two files: a and b.", (0,))]),
    (TAU2, "tau2", [("Cancel reservation R1.", "R1 is cancelled.", (0, 1))]),
    (RESPONSES_STREAM, "openai-responses", [("Weather in Paris and Rome?", "Rain, and sun.", (0, 0))]),
]


class TranscriptTest(unittest.TestCase):
    def test_request_answer_and_turns_per_format(self) -> None:
        for log, fmt, expected in TRANSCRIPTS:
            with self.subTest(log=log if isinstance(log, str) else fmt):
                found = transcripts_of(log, fmt)
                self.assertEqual([(t.request, t.answer, t.turns) for t in found], expected)
                self.assertEqual([t.position for t in found], list(range(len(expected))))

    def test_keeping_transcripts_changes_neither_sessions_nor_warnings(self) -> None:
        broken = RESPONSES_STREAM.replace(b'"output": "sun"', b'"output": "sun", "x": 1').replace(
            b'{\\"city\\": \\"Rome\\"}', b'{\\"city\\": ')  # invalid arguments: a warning with its line
        plain = import_log(broken, "openai-responses", "log.jsonl")
        kept: list[Transcript] = []
        with_transcripts = import_file(io.BytesIO(broken), "openai-responses", "log.jsonl", kept)
        self.assertEqual(with_transcripts, plain)
        self.assertEqual([str(w) for w in plain.warnings],
                         ['log.jsonl:3: conversation 0, message 2: call 1 (weather): arguments are not valid JSON; '
                          'kept as {"_raw_arguments": "{\\"city\\": "}'])


class ImportSuiteTest(unittest.TestCase):
    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name
        self.suite_dir = os.path.join(self.tmp, "suite")

    def tearDown(self) -> None:
        self._tmp.cleanup()

    def run_cli(self, *argv: str) -> tuple[int, str, str]:
        io_ = IO.memory()
        code = main(list(argv), io_)
        return code, io_.out(), io_.err()

    def write(self, name: str, data: bytes) -> str:
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as handle:
            handle.write(data)
        return path

    def read(self, *parts: str) -> str:
        with open(os.path.join(self.suite_dir, *parts), encoding="utf-8") as handle:
            return handle.read()

    def files(self) -> list[str]:
        return sorted(os.path.relpath(os.path.join(folder, name), self.suite_dir)
                      for folder, _, names in os.walk(self.suite_dir) for name in names)

    def test_sample_becomes_a_suite_that_the_recorded_agent_passes(self) -> None:
        code, out, err = self.run_cli("import", "auto", os.path.join(SAMPLES, "inspect-ai.json"),
                                      "--suite", self.suite_dir)
        self.assertEqual((code, out), (0, ""))
        self.assertEqual(err, f"detected format: inspect-ai\nsuite: {self.suite_dir}/suite.json: 2 cases, "
                              "the longest with 2 calls (eval --max-steps 2 or more)\n")
        self.assertEqual(self.files(), ["cassettes/0000.jsonl", "cassettes/0001.jsonl", "recorded.json", "suite.json"])
        self.assertEqual(self.read("suite.json"), """\
{
  "cases": [
    {
      "id": "0000",
      "question": "What is 1 + 2?",
      "expected_answer": "3",
      "expected_tools": [
        {"tool": "add", "args": {"x": 1, "y": 2}},
        {"tool": "divide", "args": {"x": 1, "y": 0}}
      ],
      "tools": {"cassette": "cassettes/0000.jsonl", "responses": "sequential"}
    },
    {
      "id": "0001",
      "question": "What is 20 + 22?",
      "expected_answer": "42",
      "expected_tools": [
        {"tool": "add", "args": {"x": 20, "y": 22}}
      ],
      "tools": {"cassette": "cassettes/0001.jsonl", "responses": "sequential"}
    }
  ]
}
""")
        self.assertEqual(self.read("cassettes", "0001.jsonl"),
                         '{"index": 0, "tool": "add", "args": {"x": 20, "y": 22}, "response": {"text": "42"}, "meta": '
                         '{"call_id": "for_tool_call_5f99e121-8910-464c-bfa1-4b55dafacfbd", "turn": 0}}\n')
        code, out, err = self.run_cli("eval", os.path.join(self.suite_dir, "suite.json"), "--agent", RECORDED)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(out.split("\n")[1:5], [
            "agent           cases  success  tool match  average steps  redundant  overreach",
            "recorded_agent      2     1.00        1.00            2.5          0          0", "", "failed: 0"])

    def test_an_atif_trajectory_becomes_a_suite_that_the_recorded_agent_passes(self) -> None:
        code, out, err = self.run_cli("import", "atif", os.path.join(SAMPLES, "atif.json"), "--suite", self.suite_dir)
        self.assertEqual((code, out, err), (0, "", f"suite: {self.suite_dir}/suite.json: 1 case, the longest with "
                                                   "2 calls (eval --max-steps 2 or more)\n"))
        code, out, err = self.run_cli("eval", os.path.join(self.suite_dir, "suite.json"), "--agent", RECORDED)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(out.split("\n")[2], "recorded_agent      1     1.00        1.00            2.0          0"
                                              "          0")

    def test_parallel_calls_are_one_group_and_a_new_agent_is_measured_against_them(self) -> None:
        log = self.write("gemini.json", GEMINI)
        self.assertEqual(self.run_cli("import", "gemini", log, "--suite", self.suite_dir)[0], 0)
        self.assertIn('      "expected_tools": [\n        [{"tool": "lights", "args": {"on": true}}, '
                      '{"tool": "music", "args": {"loud": true}}]\n      ],\n', self.read("suite.json"))
        suite = load_suite(os.path.join(self.suite_dir, "suite.json"))

        def one_by_one(conversation: Conversation) -> ToolCall | Answer:
            script = [ToolCall("music", {"loud": True}), ToolCall("lights", {"on": True})]
            if len(conversation.calls) < 2:
                return script[len(conversation.calls)]
            return Answer("Both are on.")

        def together(conversation: Conversation) -> list[ToolCall] | Answer:
            if not conversation.calls:
                return [ToolCall("music", {"loud": True}), ToolCall("lights", {"on": True})]
            return Answer("both are ON.")

        agents = [NamedAgent("recorded", RECORDED, recorded_agent), NamedAgent("one_by_one", "t:1", one_by_one),
                  NamedAgent("together", "t:2", together)]
        report = evaluate(suite, agents)
        self.assertEqual([(run.success, run.tool_match) for agent in report.agents for run in agent.runs],
                         [(True, True), (True, False), (True, True)])
        self.assertEqual([call.response for call in report.agents[0].runs[0].calls], [{"ok": True}, {"ok": True}])

    def test_each_case_answers_from_its_own_cassette(self) -> None:
        def chat(answer: str, status: str) -> dict[str, Any]:
            return {"messages": [
                {"role": "user", "content": "Status of order 7?"},
                {"role": "assistant", "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "get_order", "arguments": "{\"id\": 7}"}}]},
                {"role": "tool", "tool_call_id": "c", "content": status},
                {"role": "assistant", "content": answer}]}
        log = self.write("two.jsonl", jsonl(chat("Order 7 is packed.", "packed"), chat("Order 7 shipped.", "shipped")))
        self.assertEqual(self.run_cli("import", "openai-chat", log, "--suite", self.suite_dir)[0], 0)
        report = evaluate(load_suite(os.path.join(self.suite_dir, "suite.json")),
                          [NamedAgent("recorded", RECORDED, recorded_agent)])
        runs = report.agents[0].runs
        self.assertEqual([(run.case.id, run.calls[0].response, run.answer, run.passed) for run in runs],
                         [("0000", {"text": "packed"}, "Order 7 is packed.", True),
                          ("0001", {"text": "shipped"}, "Order 7 shipped.", True)])

    def test_conversations_without_request_or_answer_are_named_and_left_out(self) -> None:
        code, _, err = self.run_cli("import", "tau2", os.path.join(SAMPLES, "tau2.json"), "--suite", self.suite_dir)
        self.assertEqual((code, err), (2, f"""\
warning: {SAMPLES}/tau2.json: conversation 1: no user request (no user message with text); not in the suite
warning: {SAMPLES}/tau2.json: conversation 0: no final answer (no assistant text after the last tool call); not in the suite
error: {SAMPLES}/tau2.json: no conversation has both a user request and a final answer: no suite written
"""))
        self.assertFalse(os.path.lexists(self.suite_dir))
        self.assertEqual(os.listdir(self.tmp), [])
        log = self.write("tau2.json", json.dumps({"simulations": [
            {"messages": [{"role": "assistant", "content": "Hello?"}]}, *json.loads(TAU2)["simulations"],
            {"messages": [{"role": "assistant", "content": "Hello?"}]},
        ]}).encode())
        code, _, err = self.run_cli("import", "tau2", log, "--suite", self.suite_dir)
        self.assertEqual((code, err), (0, f"""\
warning: {log}: conversations 0, 2: no user request (no user message with text); not in the suite
suite: {self.suite_dir}/suite.json: 1 case, the longest with 2 calls (eval --max-steps 2 or more)
"""))
        self.assertEqual(json.loads(self.read("suite.json"))["cases"][0]["id"], "0001")  # its position in the log

    def test_refuses_a_folder_that_is_not_empty_and_other_outputs(self) -> None:
        os.mkdir(self.suite_dir)
        self.write("suite/keep.txt", b"x")
        log = os.path.join(SAMPLES, "inspect-ai.json")
        self.assertEqual(self.run_cli("import", "auto", log, "--suite", self.suite_dir),
                         (2, "", f"error: {self.suite_dir}: directory exists and is not empty (--suite writes only "
                                 "into a new or empty directory)\n"))
        self.assertEqual(os.listdir(self.suite_dir), ["keep.txt"])
        code, _, err = self.run_cli("import", "auto", log, "--suite", self.suite_dir, "--split", self.tmp)
        self.assertEqual((code, err.split("\n")[0]), (2, "error: argument --split: not allowed with argument --suite"))
        code, _, err = self.run_cli("import", "auto", log, "--suite", self.suite_dir + "2", "--mutators-out", "m")
        self.assertEqual((code, err), (2, "error: --mutators-out does not go with --suite\n"))

    def test_a_conversation_without_calls_is_a_case_and_bad_unicode_is_left_out(self) -> None:
        log = self.write("chat.jsonl", b'{"messages": [{"role": "user", "content": "Hi \\ud800"}, '
                                       b'{"role": "assistant", "content": "Hello"}]}\n'
                                       b'{"messages": [{"role": "user", "content": "Hi"}, '
                                       b'{"role": "assistant", "content": "Hello!"}]}\n')
        code, _, err = self.run_cli("import", "openai-chat", log, "--suite", self.suite_dir)
        self.assertEqual((code, err), (0, f"""\
warning: {log}: conversation 0: the request or answer is not valid Unicode (a lone surrogate); not in the suite
suite: {self.suite_dir}/suite.json: 1 case, the longest with 0 calls (eval --max-steps 1 or more)
"""))
        self.assertEqual((self.files(), self.read("cassettes", "0001.jsonl")),
                         (["cassettes/0001.jsonl", "recorded.json", "suite.json"], ""))
        report = evaluate(load_suite(os.path.join(self.suite_dir, "suite.json")),
                          [NamedAgent("recorded", RECORDED, recorded_agent)])
        self.assertEqual([(run.answer, run.passed) for run in report.agents[0].runs], [("Hello!", True)])

    def test_recorded_runs_are_scoped_to_every_case_tool(self) -> None:
        self.assertEqual(self.run_cli("import", "auto", os.path.join(SAMPLES, "inspect-ai.json"),
                                      "--suite", self.suite_dir)[0], 0)
        record = os.path.join(self.tmp, "runs")
        self.assertEqual(self.run_cli("eval", os.path.join(self.suite_dir, "suite.json"), "--agent", RECORDED,
                                      "--record", record)[0], 0)
        with open(os.path.join(record, "recorded_agent", "scope.json"), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle)["allowed_tools"], ["add", "divide"])
        self.assertEqual(sorted(os.listdir(os.path.join(record, "recorded_agent"))),
                         ["0000.jsonl", "0001.jsonl", "scope.json"])

    def test_recorded_agent_outside_its_suite_fails_the_run_with_the_reason(self) -> None:
        self.assertEqual(self.run_cli("import", "auto", os.path.join(SAMPLES, "inspect-ai.json"),
                                      "--suite", self.suite_dir)[0], 0)
        path = os.path.join(self.suite_dir, "recorded.json")
        recording = json.loads(self.read("recorded.json"))
        del recording["cases"]["0001"]
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(recording, handle)
        report = evaluate(load_suite(os.path.join(self.suite_dir, "suite.json")),
                          [NamedAgent("recorded", RECORDED, recorded_agent.__class__())])
        self.assertEqual([run.stop for run in report.agents[0].runs],
                         [None, "agent raised KeyError: 'recorded.json has no case \"0001\"'"])
        with self.assertRaises(RuntimeError):
            recorded_agent(Conversation("q"))


@integration
@unittest.skipUnless(os.path.isdir(RAW), "../shared (the real-data corpus) is absent")
class RealLogsTest(unittest.TestCase):
    """Real multi-conversation logs become suites that the recorded agent passes in full, offline."""

    def test_recorded_agent_passes_the_suite_of_each_real_log(self) -> None:
        # (raw file, format, cases, conversations left out for want of a final answer, longest case)
        for name, fmt, cases, left_out, longest in [
            ("tau-bench_gpt-4o-airline.json", "openai-chat", 149, 51, 20),
            ("tau2-bench_claude-sonnet-4-5-airline.json", "tau2", 50, 0, 36),
            ("tau2-bench_gpt-4.1-airline.json", "tau2", 20, 0, 25),
        ]:
            with self.subTest(log=name), tempfile.TemporaryDirectory() as tmp:
                folder = os.path.join(tmp, "suite")
                io_ = IO.memory()
                self.assertEqual(main(["import", fmt, os.path.join(RAW, name), "--suite", folder], io_), 0)
                self.assertEqual(io_.err().count("conversation"), 0 if not left_out else 1)
                self.assertTrue(io_.err().endswith(f"suite: {folder}/suite.json: {cases} cases, the longest with "
                                                   f"{longest} calls (eval --max-steps {longest} or more)\n"))
                if left_out:
                    listed = io_.err().split(": conversations ")[1].split(": ")[0].split(", ")
                    self.assertEqual(len(listed), left_out)
                result = os.path.join(tmp, "result.json")
                io_ = IO.memory()
                code = main(["eval", os.path.join(folder, "suite.json"), "--agent", RECORDED,
                             "--max-steps", str(longest), "--format", "json"], io_)
                self.assertEqual((code, io_.err()), (0, ""))
                report = json.loads(io_.out())
                agent = report["agents"][0]
                self.assertEqual((agent["agent"], len(agent["results"])), ("recorded_agent", cases))
                self.assertTrue(all(run["success"] and run["tool_match"] for run in agent["results"]))
                with open(result, "w", encoding="utf-8") as handle:
                    handle.write(io_.out())
                # the recorded agent's result is a baseline: against itself, nothing regressed
                io_ = IO.memory()
                code = main(["eval", os.path.join(folder, "suite.json"), "--agent", RECORDED,
                             "--max-steps", str(longest), "--baseline", result], io_)
                self.assertEqual(code, 0)
                self.assertIn("regressions: 0\n", io_.out())


if __name__ == "__main__":
    unittest.main()
