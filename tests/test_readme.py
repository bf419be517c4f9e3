"""Runs every example of README.md and of docs/*.md and compares its output exactly.

- ```console blocks: each line starting with `$ ` is a command, run with bash; the lines after it, up to
  the next `$ ` line or the end of the block, are its exact standard output. Exit codes are not checked
  (the README shows them when it matters, e.g. `; echo "exit $?"`).
- ```python blocks are run with `python -` and must exit 0; when the next block (blank lines aside) is an
  ```output block, standard output must equal it exactly. ```python norun blocks are not run.

All examples of one file run in order in one fresh temporary directory holding a copy of `samples/`
(so a file one example writes is there for the next), with PYTHONPATH set to the repository root and
`python` on PATH meaning the interpreter running the tests.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from dataclasses import dataclass

from tests.support import require

INTEGRATION_TIER = True  # the integration tier (tests/unit.py leaves this module out)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
FENCE = "```"


@dataclass(frozen=True)
class Example:
    """One thing to run: a console command or a python block, its expected output, where it stands."""

    kind: str  # "console" or "python"
    line: int  # 1-based line of the command (console) or of the opening fence (python)
    source: str
    expected: str | None  # None: output not compared
    block: int  # number of the fenced block it comes from
    file: str = "README.md"


def _blocks(text: str, name: str = "README.md") -> list[tuple[int, str, list[str]]]:
    """Fenced blocks as (line of the opening fence, info string, lines inside)."""
    blocks: list[tuple[int, str, list[str]]] = []
    lines = text.split("\n")
    position = 0
    while position < len(lines):
        line = lines[position]
        if line.startswith(FENCE):
            info, start = line[len(FENCE) :].strip(), position
            position += 1
            body = []
            while position < len(lines) and lines[position].rstrip() != FENCE:
                body.append(lines[position])
                position += 1
            if position == len(lines):
                raise ValueError(f"{name}:{start + 1}: code block is never closed")
            blocks.append((start + 1, info, body))
        position += 1
    return blocks


def _console(start: int, body: list[str], block: int, name: str = "README.md") -> list[Example]:
    examples: list[Example] = []
    command: tuple[int, str] | None = None
    output: list[str] = []
    for offset, line in enumerate(body, 1):
        if line.startswith("$ "):
            if command is not None:
                examples.append(
                    Example("console", command[0], command[1], "".join(o + "\n" for o in output), block, name)
                )
            command, output = (start + offset, line[2:]), []
        elif command is None:
            raise ValueError(f"{name}:{start + offset}: console block text before the first `$ ` command")
        else:
            output.append(line)
    if command is not None:
        examples.append(Example("console", command[0], command[1], "".join(o + "\n" for o in output), block, name))
    return examples


def parse_examples(text: str, name: str = "README.md") -> list[Example]:
    """Every runnable example of a README text, in order."""
    blocks = _blocks(text, name)
    examples: list[Example] = []
    for number, (start, info, body) in enumerate(blocks):
        words = info.split()
        language = words[0] if words else ""
        if language == "console":
            examples += _console(start, body, number, name)
        elif language == "python" and "norun" not in words[1:]:
            following = blocks[number + 1] if number + 1 < len(blocks) else None
            expected = None
            if following is not None and following[1].split()[:1] == ["output"]:
                between = text.split("\n")[start + len(body) + 1 : following[0] - 1]
                if not any(line.strip() for line in between):
                    expected = "".join(line + "\n" for line in following[2])
            examples.append(Example("python", start, "".join(line + "\n" for line in body), expected, number, name))
    return examples


def _environment(bin_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def run_example(example: Example, directory: str, env: dict[str, str]) -> str | None:
    """Run one example in `directory`; None when it matches, else a message with a diff."""
    if example.kind == "console":
        argv, stdin = ["bash", "-c", example.source], None
    else:
        argv, stdin = [sys.executable, "-"], example.source.encode()
    done = subprocess.run(argv, cwd=directory, env=env, input=stdin, capture_output=True, timeout=300)
    actual = done.stdout.decode("utf-8", "replace")
    where = f"{example.file}:{example.line}: {example.kind} example"
    if example.kind == "console":
        where += f" `{example.source}`"
    stderr = done.stderr.decode("utf-8", "replace")
    if example.kind == "python" and done.returncode != 0:
        return f"{where} exited {done.returncode}\n--- stderr ---\n{stderr}"
    if example.expected is None or actual == example.expected:
        return None
    diff = "".join(
        difflib.unified_diff(
            example.expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            f"{example.file} (expected)",
            "actual output",
        )
    )
    return f"{where}: output differs (exit {done.returncode})\n{diff}" + (
        f"--- stderr ---\n{stderr}" if stderr else ""
    )


def _tree(directory: str) -> dict[str, bytes]:
    """Every file under `directory`, by relative path, with its bytes."""
    found: dict[str, bytes] = {}
    for folder, _dirs, files in os.walk(directory):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, directory)] = handle.read()
    return found


def run_examples(examples: list[Example], rounds: int = 1, samples: bool = True) -> list[str]:
    """Run examples in order in one fresh directory holding a copy of samples/ (an empty one with
    `samples=False`); return the failures.

    With `rounds` above 1 they run again in the same directory, and the directory must end as it
    began: examples that leave files behind or answer differently the second time fail.
    """
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="readme-") as tmp:
        bin_dir = os.path.join(tmp, "bin")
        os.mkdir(bin_dir)
        os.symlink(sys.executable, os.path.join(bin_dir, "python"))
        env = _environment(bin_dir)
        directory = os.path.join(tmp, "work")
        os.mkdir(directory)
        shipped = os.path.join(ROOT, "samples")
        if samples and os.path.isdir(shipped):
            shutil.copytree(shipped, os.path.join(directory, "samples"))
        before = _tree(directory)
        for round_ in range(rounds):
            for example in examples:
                failure = run_example(example, directory, env)
                if failure is not None:
                    failures.append(failure if round_ == 0 else f"(run {round_ + 1}) {failure}")
        if rounds > 1:
            after = _tree(directory)
            changed = sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))
            if changed:
                failures.append("the examples left files behind or changed them: " + ", ".join(changed))
    return failures


# The framework pages (docs/integrations/) and the modules their examples import.
FRAMEWORKS = {"openai-agents.md": ("agents",), "pydantic-ai.md": ("pydantic_ai",),
              "langgraph.md": ("langgraph", "langchain_core")}


class ReadmeExamplesTest(unittest.TestCase):
    def test_every_example(self) -> None:
        with open(README, encoding="utf-8") as handle:
            examples = parse_examples(handle.read())
        failures = run_examples(examples, rounds=2)
        self.assertFalse(failures, "\n\n".join(failures))

    def test_the_python_examples_run_from_any_folder(self) -> None:
        # a user who installed the package has no samples/ beside them: the Python examples need none
        with open(README, encoding="utf-8") as handle:
            examples = [example for example in parse_examples(handle.read()) if example.kind == "python"]
        self.assertTrue(examples)
        failures = run_examples(examples, samples=False)
        self.assertFalse(failures, "\n\n".join(failures))

    def test_every_example_of_the_framework_pages(self) -> None:
        # each page's complete example runs with its framework's own test model (CI installs them)
        folder = os.path.join(DOCS, "integrations")
        self.assertEqual(sorted(name for name in os.listdir(folder) if name.endswith(".md")), sorted(FRAMEWORKS))
        for name, modules in sorted(FRAMEWORKS.items()):
            with self.subTest(doc=name):
                require(all(importlib.util.find_spec(module) is not None for module in modules),
                        f"docs/integrations/{name} needs {', '.join(modules)} (.ci/install.d/60-frameworks.sh)")
                with open(os.path.join(folder, name), encoding="utf-8") as handle:
                    examples = parse_examples(handle.read(), f"docs/integrations/{name}")
                self.assertTrue(any(example.kind == "python" and example.expected for example in examples))
                failures = run_examples(examples, samples=False)
                self.assertFalse(failures, "\n\n".join(failures))

    def test_every_example_of_the_docs(self) -> None:
        names = sorted(name for name in os.listdir(DOCS) if name.endswith(".md")) if os.path.isdir(DOCS) else []
        for name in names:
            with self.subTest(doc=name), open(os.path.join(DOCS, name), encoding="utf-8") as handle:
                examples = parse_examples(handle.read(), f"docs/{name}")
                failures = run_examples(examples)
                self.assertFalse(failures, "\n\n".join(failures))


SAMPLE = """# Title

```console
$ echo one
one
$ printf 'a\\nb\\n'
a
b
$ true
```

Some text.

```python
print("hi")
```

```output
hi
```

```python norun
import network
```

```json
{"not": "run"}
```

```python
x = 1
```
"""


class ParseExamplesTest(unittest.TestCase):
    def test_parse(self) -> None:
        self.assertEqual(
            parse_examples(SAMPLE),
            [
                Example("console", 4, "echo one", "one\n", 0),
                Example("console", 6, "printf 'a\\nb\\n'", "a\nb\n", 0),
                Example("console", 9, "true", "", 0),
                Example("python", 14, 'print("hi")\n', "hi\n", 1),
                Example("python", 30, "x = 1\n", None, 5),
            ],
        )

    def test_output_block_must_follow_immediately(self) -> None:
        text = "```python\nprint(1)\n```\ntext between\n```output\n1\n```\n"
        self.assertEqual(parse_examples(text), [Example("python", 1, "print(1)\n", None, 0)])

    def test_malformed(self) -> None:
        for text, message in [
            ("```console\n$ ls\n", "README.md:1: code block is never closed"),
            ("```console\nls\n```\n", "README.md:2: console block text before the first `$ ` command"),
        ]:
            with self.subTest(message), self.assertRaises(ValueError) as caught:
                parse_examples(text)
            self.assertEqual(str(caught.exception), message)


class RunExamplesTest(unittest.TestCase):
    def test_an_example_that_leaves_a_file_fails(self) -> None:
        failures = run_examples(parse_examples("```console\n$ echo x > left-behind.txt\n```\n"), rounds=2)
        self.assertEqual(failures, ["the examples left files behind or changed them: left-behind.txt"])

    def test_matching_examples_pass(self) -> None:
        self.assertEqual(run_examples(parse_examples(SAMPLE)), [])

    def test_wrong_output_fails_with_a_diff(self) -> None:
        (failure,) = run_examples(parse_examples("```console\n$ printf 'a\\nb\\n'\na\nc\n```\n"))
        self.assertEqual(
            failure,
            "README.md:2: console example `printf 'a\\nb\\n'`: output differs (exit 0)\n"
            "--- README.md (expected)\n+++ actual output\n@@ -1,2 +1,2 @@\n a\n-c\n+b\n",
        )

    def test_failing_python_block(self) -> None:
        (failure,) = run_examples(parse_examples("```python\nraise SystemExit('boom')\n```\n"))
        self.assertEqual(failure, "README.md:1: python example exited 1\n--- stderr ---\nboom\n")

    def test_wrong_python_output(self) -> None:
        (failure,) = run_examples(parse_examples("```python\nprint(2)\n```\n\n```output\n1\n```\n"))
        self.assertIn("-1\n+2\n", failure)

    def test_environment(self) -> None:
        text = (
            "```console\n$ ls samples/scope.json samples/session-dirty.jsonl\n"
            "samples/scope.json\nsamples/session-dirty.jsonl\n"
            "$ python -m toolreplay version\ntoolreplay 0.8.0\n$ echo x > made.txt\n$ cat made.txt\nx\n```\n"
            "```console\n$ cat made.txt\nx\n$ ls\nmade.txt\nsamples\n```\n"
        )
        self.assertEqual(run_examples(parse_examples(text)), [])


if __name__ == "__main__":
    unittest.main()
