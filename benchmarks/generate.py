"""Write a realistic, deterministic agent session of N records: `python benchmarks/generate.py N OUT.jsonl`.

The session is a long run of short episodes, each one agent task: a coding agent over a project's
files, a retail support agent over a customer's orders, a travel agent over a reservation. Calls mix
read tools and write tools; responses run from about a hundred bytes (a write's acknowledgement) to a
few KB (a file, a search page, an order), with accents, CJK and emoji, prices and scores, nested
objects and arrays. The mean line is about 550 bytes, so 1,000,000 records is about 550 MB.

Repeats follow what real agent logs show. Over /work/shared/corpus/real/ (1,228 sessions, 11,205
calls) 1,643 calls (14.7%) repeat a canonical call made earlier in the same session; 1,067 of them
(9.5% of all calls) repeat the call just before (a retry), the rest re-fetch something read earlier;
436 of the repeats (27%) got a different response (a write in between, or a transient error
followed by success); 16.5% of the calls are to the domains' write tools. The generator aims at
the same shape, with writes that change what a re-fetch returns and transient `503` errors that a
retry clears. Its first 200,000 records measure: 15.0% repeats (9.5% of all calls right after the
same call), 24% of repeats with a different response, 23% write calls, mean line 546 bytes (median
480, 90th percentile 962, largest 3,432); about 4% of the records hold an emoji.

Everything comes from one seeded `random.Random`: the same N gives the same bytes, and a smaller N
gives a prefix of a larger one. Memory is constant: only the current episode is kept.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["READ_TOOLS", "WRITE_TOOLS", "SEED", "generate_lines", "write_session", "main"]

SEED = 20260601
READ_TOOLS = ("read_file", "list_dir", "search", "get_user_details", "get_order", "search_products",
              "get_flight_status", "get_reservation_details", "calculate")
WRITE_TOOLS = ("write_file", "run_command", "update_order", "cancel_order", "send_email",
               "update_reservation")

RETRY_RATE = 0.092     # repeat the previous call (plus the retries that follow a transient error)
REFETCH_RATE = 0.042   # repeat an earlier call of the same episode
TRANSIENT_RATE = 0.012  # a read fails with 503; the agent almost always retries it
_FRESH_TRIES = 4  # a new step that happens to repeat an earlier call is redrawn this many times

_WORDS = (
    "the", "of", "and", "to", "in", "is", "for", "on", "with", "as", "by", "at", "from", "this", "that",
    "order", "user", "file", "value", "return", "config", "install", "update", "request", "response",
    "delivery", "package", "payment", "refund", "flight", "baggage", "seat", "invoice", "customer",
    "function", "module", "import", "class", "error", "result", "timeout", "cache", "token", "session",
    "café", "naïve", "résumé", "Zürich", "São", "Paulo", "Kraków", "Ærøskøbing", "crème", "brûlée",
    "東京", "数据", "설정", "配送", "注文", "Привет", "مرحبا", "✅", "—", "…", "€12",
)
# Outside the Basic Multilingual Plane (surrogate pairs in JSON): rarer than accents in real text.
_EMOJI = ("🚀", "👍", "📦", "😀", "🙏")
EMOJI_RATE = 0.02  # per text field: about 5% of records hold one
_FIRST = ("Isabella", "José", "Zoë", "Mei", "Aiko", "Lukas", "Ömer", "Chloé", "Sven", "Amara", "Ravi",
          "Noah", "Olivia", "Liam", "Yuki", "Søren", "Ana", "Mateo", "Fatima", "Ethan")
_LAST = ("Lopez", "Müller", "Nguyen", "田中", "Kowalski", "García", "O'Brien", "Smith", "Dubois",
         "Rossi", "Petrov", "Kim", "Haddad", "Jensen", "Silva", "Chen", "Novák", "Ito", "Brown", "Patel")
_CITIES = (("Phoenix", "AZ", "USA"), ("München", "BY", "Germany"), ("São Paulo", "SP", "Brazil"),
           ("東京", "13", "Japan"), ("Montréal", "QC", "Canada"), ("Austin", "TX", "USA"),
           ("Kraków", "MA", "Poland"), ("Seattle", "WA", "USA"))
_PRODUCTS = (("Bluetooth Speaker", {"color": "red", "battery life": "10 hours"}),
             ("Espresso Machine", {"pressure": "15 bar", "capacity": "1.5L"}),
             ("Hiking Boots", {"size": "42", "material": "leather", "waterproof": "yes"}),
             ("Desk Lamp", {"color": "white", "brightness": "high"}),
             ("T-Shirt", {"color": "blue", "size": "M", "style": "crew neck"}),
             ("Mechanical Keyboard", {"switch type": "tactile", "layout": "JIS 日本語"}),
             ("Tea Kettle", {"material": "glass", "capacity": "1.7 liters"}),
             ("Running Shoes", {"size": "10", "color": "black"}))
_EXTENSIONS = (".py", ".md", ".json", ".toml", ".txt", ".ts")
_DIRS = ("src", "docs", "tests", "lib", "config", "scripts")
_AIRPORTS = ("JFK", "LAX", "SFO", "ORD", "ATL", "SEA", "BOS", "DEN", "MIA", "PHX", "NRT", "MUC")
_COMMANDS = ("pytest -q", "ruff check .", "mypy --strict src", "git status --short", "make build",
             "npm test", "python -m unittest", "git diff --stat")


# tool, args, response, the entity the response depends on, and that entity's version when answered
_Call = tuple[str, dict[str, Any], dict[str, Any], str, int]


def _text(rng: random.Random, words: int) -> str:
    line = " ".join(rng.choices(_WORDS, k=words))
    end = f" {rng.choice(_EMOJI)}" if rng.random() < EMOJI_RATE else "."
    return line[:1].upper() + line[1:] + end


def _ident(rng: random.Random, digits: int) -> str:
    return str(rng.randrange(10 ** (digits - 1), 10 ** digits))


class _Episode:
    """One agent task: its entities, the calls made so far and the state they saw."""

    def __init__(self, rng: random.Random, kind: str) -> None:
        self.rng = rng
        self.kind = kind
        self.calls: list[_Call] = []
        self.versions: dict[str, int] = {}
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        self.user = {"first_name": first, "last_name": last}
        self.user_id = f"{first.lower()}_{_ident(rng, 7)}"
        self.orders = [f"#W{_ident(rng, 7)}" for _ in range(rng.randint(1, 4))]
        self.project = f"{rng.choice(('atlas', 'borealis', 'kite', 'ledger', 'mosaic'))}-{_ident(rng, 6)}"
        self.files = [f"{self.project}/{rng.choice(_DIRS)}/{rng.choice(_WORDS[15:44])}_{i}"
                      f"{rng.choice(_EXTENSIONS)}" for i in range(rng.randint(3, 9))]
        self.day = rng.randrange(3650)  # the episode's travel dates: 2020 to 2029
        self.reservation = _ident(rng, 6)

    def fresh_call(self) -> tuple[str, dict[str, Any], str]:
        """A new call for this episode's task: tool, args, and the entity its response depends on."""
        rng = self.rng
        roll = rng.random()
        if self.kind == "code":
            path = rng.choice(self.files)
            if roll < 0.42:
                return "read_file", {"path": path}, path
            if roll < 0.54:
                return "list_dir", {"path": path.rpartition("/")[0], "recursive": rng.random() < 0.3}, "dir"
            if roll < 0.82:
                return "search", {"query": " ".join(rng.choices(_WORDS[:60], k=rng.randint(1, 3))),
                                  "limit": rng.choice((5, 10, 20)), "path": self.project}, "search"
            if roll < 0.90:
                return "write_file", {"path": path, "text": _text(rng, rng.randint(20, 90))}, path
            return "run_command", {"command": rng.choice(_COMMANDS), "cwd": self.project}, "cmd"
        if self.kind == "retail":
            order = rng.choice(self.orders)
            if roll < 0.15:
                return "get_user_details", {"user_id": self.user_id}, "user"
            if roll < 0.50:
                return "get_order", {"order_id": order}, order
            if roll < 0.72:
                query = f"{rng.choice(_WORDS[44:])} {rng.choice(_PRODUCTS)[0]}"
                max_price = rng.randint(20, 1000) + rng.choice((0, 0.5, 0.99))
                return "search_products", {"query": query, "max_price": max_price}, "catalog"
            if roll < 0.82:
                return "calculate", {"expression": f"{rng.uniform(5, 900):.2f} * {rng.randint(1, 4)}"}, "none"
            if roll < 0.90:
                return "update_order", {"order_id": order, "address": self._address(),
                                        "note": _text(rng, rng.randint(3, 12))}, order
            if roll < 0.94:
                return "cancel_order", {"order_id": order, "reason": rng.choice(
                    ("no longer needed", "ordered by mistake"))}, order
            return "send_email", {"to": f"{self.user_id}@example.com", "subject": _text(rng, 5),
                                  "body": _text(rng, rng.randint(30, 80))}, "mail"
        if roll < 0.35:
            return "get_reservation_details", {"reservation_id": self.reservation}, "reservation"
        if roll < 0.72:
            return "get_flight_status", {"flight_number": f"HAT{rng.randint(1, 999):03d}",
                                         "date": self._date()}, "none"
        if roll < 0.88:
            return "get_user_details", {"user_id": self.user_id}, "user"
        cabin = rng.choice(("economy", "business"))
        flights = [self._flight() for _ in range(rng.randint(1, 2))]
        return "update_reservation", {"reservation_id": self.reservation, "cabin": cabin,
                                      "flights": flights}, "reservation"

    def _address(self) -> dict[str, Any]:
        city, state, country = self.rng.choice(_CITIES)
        return {"address1": f"{self.rng.randint(1, 999)} {self.rng.choice(_WORDS[44:56])} Street",
                "address2": f"Suite {self.rng.randint(100, 999)}", "city": city, "state": state,
                "country": country, "zip": _ident(self.rng, 5)}

    def _date(self) -> str:
        day = self.day + self.rng.randint(0, 6)
        return f"{2020 + day // 365}-{1 + day % 365 // 31:02d}-{1 + day % 28:02d}"

    def _flight(self) -> dict[str, Any]:
        origin, destination = self.rng.sample(_AIRPORTS, 2)
        return {"flight_number": f"HAT{self.rng.randint(1, 299):03d}", "origin": origin,
                "destination": destination, "date": self._date(),
                "price": self.rng.randint(50, 2000)}

    def response(self, tool: str, args: dict[str, Any], entity: str) -> dict[str, Any]:
        """The tool's answer given the entity's current version."""
        rng = self.rng
        version = self.versions.get(entity, 0)
        if tool in WRITE_TOOLS:
            self.versions[entity] = version + 1
        builder = _RESPONSES[tool]
        return builder(self, rng, args, version)


def _read_file(ep: _Episode, rng: random.Random, args: dict[str, Any], version: int) -> dict[str, Any]:
    lines = [_text(rng, rng.randint(4, 14)) for _ in range(rng.choice((2, 4, 8, 16, 32)))]
    return {"path": args["path"], "size": sum(len(line) for line in lines), "version": version,
            "text": "\n".join(lines)}


def _list_dir(ep: _Episode, rng: random.Random, args: dict[str, Any], version: int) -> dict[str, Any]:
    entries = [{"name": path.split("/")[-1], "type": "file", "bytes": rng.randint(10, 10 ** 6)}
               for path in ep.files]
    return {"path": args["path"], "entries": entries, "truncated": False}


def _search(ep: _Episode, rng: random.Random, args: dict[str, Any], version: int) -> dict[str, Any]:
    hits = [{"path": rng.choice(ep.files), "line": rng.randint(1, 400),
             "score": round(rng.random(), 4) if rng.random() > 0.02 else rng.random() * 1e-5,
             "snippet": _text(rng, rng.randint(5, 15))} for _ in range(rng.randint(0, 5))]
    return {"query": args["query"], "count": len(hits), "took_ms": rng.randint(3, 90), "results": hits}


def _get_user(ep: _Episode, rng: random.Random, args: dict[str, Any], version: int) -> dict[str, Any]:
    return {"user_id": ep.user_id, "name": ep.user, "email": f"{ep.user_id}@example.com",
            "address": ep._address(), "membership": rng.choice(("gold", "silver", "regular")),
            "payment_methods": {f"credit_card_{_ident(rng, 7)}": {"brand": rng.choice(("visa", "amex")),
                                                                  "last_four": _ident(rng, 4)},
                                f"gift_card_{_ident(rng, 7)}": {"balance": round(rng.uniform(0, 500), 2)}},
            "orders": ep.orders}


def _get_order(ep: _Episode, rng: random.Random, args: dict[str, Any], version: int) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    total = 0.0
    for _ in range(rng.randint(1, 3)):
        name, options = rng.choice(_PRODUCTS)
        item_id = _ident(rng, 10)
        price = round(rng.uniform(5, 900), 2)
        total += price
        items.append({"name": name, "item_id": item_id, "price": price, "options": options})
    status = ("pending", "processed", "cancelled", "delivered")[min(version, 3)]
    return {"order_id": args["order_id"], "user_id": ep.user_id, "status": status, "items": items,
            "total": round(total, 2),
            "payment_history": [{"transaction_type": "payment", "amount": round(rng.uniform(5, 900), 2)}],
            "fulfillments": [] if status == "pending" else [{"tracking_id": [_ident(rng, 12)]}]}


def _search_products(ep: _Episode, rng: random.Random, args: dict[str, Any], version: int) -> dict[str, Any]:
    return {"products": [{"product_id": _ident(rng, 10), "name": args["query"], "price": round(
        rng.uniform(5, float(args["max_price"])), 2), "rating": round(rng.uniform(1, 5), 1),
        "review": _text(rng, rng.randint(5, 20))} for _ in range(rng.randint(1, 4))]}


def _calculate(ep: _Episode, rng: random.Random, args: dict[str, Any], version: int) -> dict[str, Any]:
    price, _, count = args["expression"].partition(" * ")
    return {"text": f"{float(price) * int(count):.2f}"}


def _flight_status(ep: _Episode, rng: random.Random, args: dict[str, Any], version: int) -> dict[str, Any]:
    return {"text": rng.choice(("available", "delayed", "on time", "landed", "cancelled"))}


def _reservation(ep: _Episode, rng: random.Random, args: dict[str, Any], version: int) -> dict[str, Any]:
    return {"reservation_id": args["reservation_id"], "user_id": ep.user_id,
            "cabin": ("economy", "business")[version % 2], "flights": [ep._flight() for _ in range(2)],
            "passengers": [{"first_name": ep.user["first_name"], "last_name": ep.user["last_name"],
                            "dob": f"19{rng.randint(50, 99)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}"}],
            "total_baggages": rng.randint(0, 3), "insurance": rng.choice(("yes", "no"))}


def _acknowledge(ep: _Episode, rng: random.Random, args: dict[str, Any], version: int) -> dict[str, Any]:
    return {"ok": True, "version": version + 1}


def _run_command(ep: _Episode, rng: random.Random, args: dict[str, Any], version: int) -> dict[str, Any]:
    return {"exit_code": rng.choice((0, 0, 0, 1)), "stdout": _text(rng, rng.randint(5, 60)),
            "seconds": round(rng.uniform(0.1, 30), 3)}


_RESPONSES: dict[str, Callable[[_Episode, random.Random, dict[str, Any], int], dict[str, Any]]] = {
    "read_file": _read_file, "list_dir": _list_dir, "search": _search, "get_user_details": _get_user,
    "get_order": _get_order, "search_products": _search_products, "calculate": _calculate,
    "get_flight_status": _flight_status, "get_reservation_details": _reservation,
    "write_file": _acknowledge, "update_order": _acknowledge, "cancel_order": _acknowledge,
    "send_email": _acknowledge, "update_reservation": _acknowledge, "run_command": _run_command,
}
_TRANSIENT = {"error": True, "text": "Error: 503 Service Unavailable"}


def _repeat(episode: _Episode, call: _Call) -> _Call:
    """The same call again: the same answer unless its entity changed since (or it had failed)."""
    tool, args, response, entity, seen = call
    version = episode.versions.get(entity, 0)
    if tool in WRITE_TOOLS:
        return call
    if response is _TRANSIENT or version != seen:
        return tool, args, episode.response(tool, args, entity), entity, version
    if tool == "search":  # timing is part of the answer: a real search never repeats it exactly
        return tool, args, {**response, "took_ms": episode.rng.randint(3, 90)}, entity, version
    return call


def _episode_calls(rng: random.Random) -> Iterator[_Call]:
    episode = _Episode(rng, rng.choices(("code", "retail", "travel"), (4, 4, 2))[0])
    calls = episode.calls
    for _ in range(rng.randint(3, 24)):
        roll = rng.random()
        if calls and (roll < RETRY_RATE or calls[-1][2] is _TRANSIENT and roll < 0.9):
            call = _repeat(episode, calls[-1])
        elif len(calls) > 1 and roll < RETRY_RATE + REFETCH_RATE:
            call = _repeat(episode, rng.choice(calls[:-1]))
        else:
            for _ in range(_FRESH_TRIES):  # the task moves on: prefer something not asked yet
                tool, args, entity = episode.fresh_call()
                earlier = [call for call in calls if call[0] == tool and call[1] == args]
                if not earlier:
                    break
            version = episode.versions.get(entity, 0)
            if earlier:  # the task led back to something already asked: the world answers the same
                call = _repeat(episode, earlier[-1])
            elif tool not in WRITE_TOOLS and rng.random() < TRANSIENT_RATE:
                call = tool, args, _TRANSIENT, entity, version
            else:
                call = tool, args, episode.response(tool, args, entity), entity, version
        calls.append(call)
        yield call


def generate_lines(count: int, seed: int = SEED) -> Iterator[str]:
    """Yield `count` session lines (without newlines) in the byte format of the real corpus."""
    rng = random.Random(seed)
    dumps = json.JSONEncoder(allow_nan=False).encode  # what toolreplay.format.records.format_record writes
    index = 0
    while index < count:
        for tool, args, response, _, _ in _episode_calls(rng):
            if index >= count:
                return
            yield dumps({"index": index, "tool": tool, "args": args, "response": response})
            index += 1


def write_session(count: int, path: str, seed: int = SEED) -> None:
    """Write the session to `path` whole or not at all (a temporary file renamed into place)."""
    directory = os.path.dirname(os.path.abspath(path))
    handle = tempfile.NamedTemporaryFile("w", encoding="ascii", newline="\n", dir=directory,  # noqa: SIM115
                                         prefix=".generate-", suffix=".tmp", delete=False)
    try:
        with handle:
            batch: list[str] = []
            for line in generate_lines(count, seed):
                batch.append(line)
                if len(batch) == 4096:
                    batch.append("")
                    handle.write("\n".join(batch))
                    batch.clear()
            if batch:
                batch.append("")
                handle.write("\n".join(batch))
        os.chmod(handle.name, 0o644)
        os.replace(handle.name, path)
    finally:
        if os.path.exists(handle.name):
            os.unlink(handle.name)


def main(argv: list[str] | None = None) -> int:
    """Command line: generate.py N OUT.jsonl [--seed S]."""
    args = list(sys.argv[1:] if argv is None else argv)
    seed = SEED
    if len(args) == 4 and args[2] == "--seed" and args[3].isdigit():
        seed = int(args[3])
        args = args[:2]
    if len(args) != 2 or not args[0].isdigit():
        sys.stderr.write("usage: python benchmarks/generate.py N OUT.jsonl [--seed S]\n")
        return 2
    write_session(int(args[0]), args[1], seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
