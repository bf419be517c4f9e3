"""No module of toolreplay/ reaches into httpx's or httpcore's private internals: another library is used
through its public API only, so that its next release cannot break the proxy from the inside.

A scan of the syntax trees: no import of a private module or name of theirs (`httpx._utils`,
`from httpx import _x`); no `_name` attribute on one of their modules or on a name imported from them;
and a module that imports either touches no private attribute but its own (`self._x`, `cls._x`): an
object such a module handles may be theirs (`client._transport_for_url`, `getattr(pool, "_pool")`).
"""

from __future__ import annotations

import ast
import os
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARIES = ("httpx", "httpcore")
_ATTRIBUTE_FUNCTIONS = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _theirs(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in LIBRARIES


def private_uses(source: str, path: str) -> list[str]:
    """`PATH:LINE: what` for each use of a private name of httpx or httpcore in one module's source."""
    tree = ast.parse(source, path)
    found: list[tuple[int, str]] = []  # (line, what)
    imported: set[str] = set()  # the names their modules or members are bound to here
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _theirs(alias.name):
                    imported.add((alias.asname or alias.name).split(".")[0])
                    if any(_private(part) for part in alias.name.split(".")):
                        found.append((node.lineno, f"imports {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _theirs(node.module):
            assert node.module is not None
            for alias in node.names:
                imported.add(alias.asname or alias.name)
                if any(_private(part) for part in (*node.module.split("."), alias.name)):
                    found.append((node.lineno, f"imports {alias.name} from {node.module}"))
    if imported:
        found += _private_attributes(tree)
    return [f"{path}:{line}: {what}" for line, what in sorted(found)]


def _private_attributes(tree: ast.AST) -> list[tuple[int, str]]:
    """The private attributes a module touches on anything but `self` and `cls`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            what = base.id if isinstance(base, ast.Name) else ast.unparse(base)
            found.append((node.lineno, f"{what}.{node.attr}"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _ATTRIBUTE_FUNCTIONS
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _private(node.args[1].value)):
            found.append((node.lineno, f"{node.func.id}(..., {node.args[1].value!r})"))
    return found


def package_sources() -> list[tuple[str, str]]:
    """(path relative to the checkout, source) of every module of toolreplay/, in path order."""
    sources = []
    for folder, directories, files in os.walk(os.path.join(ROOT, "toolreplay")):
        directories.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as handle:
                    sources.append((os.path.relpath(path, ROOT), handle.read()))
    return sources


class PrivateApiTest(unittest.TestCase):
    def test_no_module_uses_a_private_name_of_httpx_or_httpcore(self) -> None:
        sources = package_sources()
        self.assertGreater(len(sources), 50)
        found = [use for path, source in sources for use in private_uses(source, path)]
        self.assertEqual(found, [])

    def test_the_scan_finds_each_kind_of_use(self) -> None:
        source = (
            "import httpx\n"
            "import httpcore as core\n"
            "from httpx._utils import get_environment_proxies\n"
            "from httpx import _config\n"
            "import httpx._models\n"
            "def f(client, pool):\n"
            "    client._transport_for_url(None)\n"
            "    pool._network_backend = None\n"
            "    getattr(client, '_mounts', None)\n"
            "    core._async.x\n"
            "    self._mine, cls._ours, client.__class__, getattr(client, '__dict__')\n"
        )
        self.assertEqual(private_uses(source, "m.py"), [
            "m.py:3: imports get_environment_proxies from httpx._utils",
            "m.py:4: imports _config from httpx",
            "m.py:5: imports httpx._models",
            "m.py:7: client._transport_for_url",
            "m.py:8: pool._network_backend",
            "m.py:9: getattr(..., '_mounts')",
            "m.py:10: core._async",
        ])

    def test_a_module_that_does_not_import_them_keeps_its_own_privates(self) -> None:
        self.assertEqual(private_uses("import asyncio\ndef f(pool):\n    pool._give_back(1)\n", "m.py"), [])
        self.assertEqual(private_uses("from httpx import AsyncClient\nAsyncClient._x\n", "m.py"), ["m.py:2: AsyncClient._x"])


if __name__ == "__main__":
    unittest.main()
