"""The package layout by layer: every import inside `toolreplay` points down the list of layers, never up."""

from __future__ import annotations

import ast
import os
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "toolreplay")

# From the ground up; a module may import its own layer and any layer before it.
LAYERS = ("errors", "format", "policy", "importers", "audit", "guard", "mcp", "hooks", "adapters", "report", "console",
          "evaluation", "demos", "cli")
# The front ends sit side by side over the guard's core: none imports another (nor what is above them).
FRONT_ENDS = ("mcp", "hooks", "adapters")
# Thin re-exports of old import paths, kept for one release: the only modules allowed to point upward.
COMPATIBILITY = {"toolreplay.guard.adapters.langgraph", "toolreplay.guard.adapters.openai_agents",
                 "toolreplay.guard.adapters.pydantic_ai"}
# Top-level modules that are not layers of their own.
TOP_LEVEL = {"__init__": "errors", "__version__": "errors", "__main__": "cli", "recorder": "guard"}


def layer_of(module: str) -> str:
    """The layer of a dotted module name inside the package (`toolreplay.audit.replay` -> `audit`)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "errors"
    head = parts[1]
    return TOP_LEVEL.get(head, head)


def imports_of(path: str, module: str) -> list[tuple[int, str]]:
    """Every `toolreplay...` module the file imports, anywhere in it (lazy imports included)."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names if alias.name.startswith("toolreplay"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: -node.level] if not path.endswith("__init__.py") else module.split(".")
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("toolreplay"):
                if target == "toolreplay":
                    found.extend((node.lineno, f"toolreplay.{alias.name}") for alias in node.names)
                else:
                    found.append((node.lineno, target))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module":
            if node.args and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("toolreplay"):
                found.append((node.lineno, str(node.args[0].value)))
    return found


def _sideways(source: str, target: str) -> bool:
    """A front end importing another front end."""
    return source in FRONT_ENDS and target in FRONT_ENDS and source != target


class LayersTest(unittest.TestCase):
    def test_every_module_belongs_to_a_known_layer(self) -> None:
        for name in os.listdir(PACKAGE):
            stem = name[:-3] if name.endswith(".py") else name
            if name.startswith((".", "__pycache__")) or name == "py.typed":
                continue
            self.assertIn(TOP_LEVEL.get(stem, stem), LAYERS, f"toolreplay/{name} is in no layer")

    def test_imports_point_down(self) -> None:
        upward = []
        for folder, _dirs, files in os.walk(PACKAGE):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                module = rel[: -len(".__init__")] if rel.endswith(".__init__") else rel
                if module in COMPATIBILITY:
                    continue
                own = LAYERS.index(layer_of(module))
                for line, target in imports_of(path, module):
                    if LAYERS.index(layer_of(target)) > own or _sideways(layer_of(module), layer_of(target)):
                        upward.append(f"{os.path.relpath(path, ROOT)}:{line}: {module} imports {target}")
        self.assertEqual(upward, [])

    def test_the_check_sees_an_upward_import(self) -> None:
        self.assertEqual(layer_of("toolreplay.audit.replay"), "audit")
        self.assertTrue(_sideways("hooks", "mcp"))
        self.assertFalse(_sideways("hooks", "guard"))
        self.assertGreater(LAYERS.index(layer_of("toolreplay.cli")), LAYERS.index(layer_of("toolreplay.format.records")))

    def test_public_names_of_earlier_releases_still_import(self) -> None:
        from toolreplay.evaluation import evaluate
        from toolreplay.guard import ConsoleApprover, Gate
        from toolreplay.policy import load_policy
        from toolreplay.recorder import SessionRecorder
        for name in (evaluate, ConsoleApprover, Gate, load_policy, SessionRecorder):
            self.assertTrue(callable(name))

    def test_the_guard_holds_no_front_end(self) -> None:
        guard = sorted(name for name in os.listdir(os.path.join(PACKAGE, "guard")) if not name.startswith("__"))
        self.assertEqual([name for name in guard if name.startswith(("mcp", "http", "claude", "hook"))], [])
        self.assertEqual(sorted(name for name in os.listdir(os.path.join(PACKAGE, "guard", "adapters")) if name.endswith(".py")),
                         ["__init__.py", "langgraph.py", "openai_agents.py", "pydantic_ai.py"])

    def test_the_package_ships_type_information(self) -> None:
        self.assertTrue(os.path.isfile(os.path.join(PACKAGE, "py.typed")))


if __name__ == "__main__":
    unittest.main()
