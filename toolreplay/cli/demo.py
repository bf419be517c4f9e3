"""`demo NAME`: the built-in demonstrations, each a module under `toolreplay.demos` with `run(out) -> int`."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from toolreplay.cli._io import IO

__all__ = ["register"]

# Demo name -> module; each module has `run(out: TextIO, record: str | None) -> int`.
_DEMOS = {
    "injection": "toolreplay.demos.injection",
    "eval": "toolreplay.demos.evaluation",
}


def _run_demo(args: argparse.Namespace, io: IO) -> int:
    module = importlib.import_module(_DEMOS[args.demo])
    code: int = module.run(io.stdout, record=args.record)
    return code


def register(subparsers: Any) -> None:
    """Add `demo NAME [--record FILE]`."""
    parser = subparsers.add_parser(
        "demo", help="run one of the built-in demonstrations",
        epilog="exit codes:\n  0  the demonstration ran as documented (injection)\n"
               "  1  eval: a run failed, as `eval` exits (the sloppy model fails two cases)\n  2  usage error")
    parser.add_argument("demo", metavar="NAME", choices=sorted(_DEMOS),
                        help="which demonstration: " + ", ".join(sorted(_DEMOS)))
    parser.add_argument("--record", metavar="PATH", help="where to write the demonstration's record")
    parser.set_defaults(run=_run_demo)
