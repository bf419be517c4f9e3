"""A tiny MCP stdio server for the proxy's tests and benchmark: standard library only, one message a line.

Tools: `echo` (returns its arguments as text), `write_note` (a write: appends to --notes FILE; with `"hang": true` it then sleeps for an hour),
`tick` (a read whose answer changes: `tick N` on its Nth call), `blob` (a result of `size` bytes), `hold` (never answers; it serves other
requests until the client cancels it, as servers that honour `notifications/cancelled` do; with `--began FILE` it first appends
`hold ID` to FILE, so a test knows the server has the call), `ask_client` (sends the client a `roots/list` request
`ask-N`, serves other requests meanwhile, and returns its answer) and `noisy` (writes a
malformed line and a notification before its result), `crash` (exits without answering), `forge` (first sends a
result for the client's request `target`, which it was never sent), `needs_input` (answers `input_required`
until it is called again with `inputResponses`, the multi-round-trip flow of protocol 2026-07-28). `--description TEXT` changes `echo`'s
description (a rug pull between two runs). A call with `params.task` gets a task handle (`task-N`) as its result. `--odd` puts valid JSON that Python cannot write back as such
into the listing (a lone surrogate escape, the number 1e400) and adds the tool `odd`, whose result holds both. `--resources` offers
the resources `note://one` and `note://two` with subscriptions (another URI's subscription is refused) and logging levels, and adds
the tool `touch`: it sends `notifications/resources/updated` for each resource subscribed to, then answers with the logging level
and the subscriptions. Batches are answered with a batch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")


def _tools(description: str) -> list[dict[str, object]]:
    text = {"type": "object", "properties": {"text": {"type": "string"}}}
    return [
        {"name": "echo", "description": description, "inputSchema": text,
         "annotations": {"readOnlyHint": True}},
        {"name": "write_note", "description": "Append a note.", "inputSchema": text,
         "annotations": {"destructiveHint": False}},
        {"name": "ask_client", "description": "Ask the client for its roots.", "inputSchema": {"type": "object"}},
        {"name": "tick", "description": "Count the calls.", "inputSchema": {"type": "object"}},
        {"name": "blob", "description": "Return size bytes.", "inputSchema": {"type": "object"}},
        {"name": "hold", "description": "Answer only when cancelled (never).", "inputSchema": {"type": "object"}},
        {"name": "noisy", "description": "Write noise, then answer.", "inputSchema": {"type": "object"}},
        {"name": "forge", "description": "Send a result for the client's request `target`.",
         "inputSchema": {"type": "object"}},
        {"name": "needs_input", "description": "Ask the user first (2026-07-28 input_required).",
         "inputSchema": {"type": "object"}},
        {"name": "crash", "description": "Exit at once.", "inputSchema": {"type": "object"}},
        {"name": "delete_all", "description": "Delete everything.", "inputSchema": {"type": "object"}},
    ]


NOTES = ("note://one", "note://two")


class TinyServer:
    def __init__(self, description: str, notes: str | None, odd: bool = False, resources: bool = False,
                 began: str | None = None) -> None:
        self.began = began
        self.odd = odd
        self.resources = resources
        self.subscribed: list[str] = []
        self.level: str | None = None
        self.description = description
        self.notes = notes
        self.asked = 0
        self.ticks = 0
        self.tasks = 0

    def send(self, message: object) -> None:
        sys.stdout.write(json.dumps(message, separators=(",", ":")).replace('"__BIG__"', "1e400") + "\n")
        sys.stdout.flush()

    def answer(self, request: dict[str, object]) -> dict[str, object] | None:
        method, params = request.get("method"), request.get("params") or {}
        assert isinstance(params, dict)
        if "id" not in request:
            return None
        result: object
        if method == "initialize":
            wanted = params.get("protocolVersion")
            result = {"protocolVersion": wanted if wanted in VERSIONS else VERSIONS[-1],
                      "capabilities": {"tools": {"listChanged": True}, **({
                          "resources": {"subscribe": True}, "logging": {}} if self.resources else {})},
                      "serverInfo": {"name": "tiny", "version": "1.0"}}
        elif method == "ping":
            result = {}
        elif self.resources and method in ("resources/subscribe", "resources/unsubscribe", "logging/setLevel",
                                           "resources/list"):
            return self.resource_request(request["id"], str(method), params)
        elif method == "tools/list":
            result = {"tools": _tools(self.description)}
            if self.resources:
                result["tools"].append({"name": "touch", "description": "Touch the notes subscribed to.",
                                        "inputSchema": {"type": "object"}})
            if self.odd:
                result["tools"][0]["description"] += " \ud800"
                result["tools"][0]["inputSchema"]["properties"]["text"]["maxLength"] = "__BIG__"
                result["tools"].append({"name": "odd", "description": "Odd JSON.", "inputSchema": {"type": "object"}})
        elif method == "tools/call" and params.get("name") == "hold":
            self.hold(request["id"])
            return None
        elif method == "tools/call" and params.get("name") == "odd":
            result = {"content": [{"type": "text", "text": "x\ud800y"}], "structuredContent": {"n": "__BIG__"},
                      "isError": False}
        elif method == "tools/call":
            result = self.call(str(params.get("name")), params.get("arguments") or {})
            if isinstance(params.get("task"), dict):  # 2025-11-25: a task-augmented call gets a task handle
                self.tasks += 1
                result = {"task": {"taskId": f"task-{self.tasks}", "status": "working", "ttl": params["task"].get("ttl")}}
            if params.get("name") == "needs_input" and "inputResponses" not in params:
                result = {"resultType": "input_required", "requestState": "round-1", "inputRequests": {
                    "q": {"method": "elicitation/create", "params": {"mode": "form", "message": "Which?",
                          "requestedSchema": {"type": "object", "properties": {"pick": {"type": "string"}}}}}}}
            elif params.get("name") == "needs_input":
                answers = json.dumps(params["inputResponses"], sort_keys=True)
                result = {"content": [{"type": "text", "text": f"needs_input {answers}"}], "isError": False}
        else:
            return {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": "Method not found"}}
        meta = params.get("_meta")
        if isinstance(meta, dict) and "io.modelcontextprotocol/protocolVersion" in meta and isinstance(result, dict):
            result = {"resultType": "complete", **result}  # protocol 2026-07-28: every result has a type
            if method == "tools/list":
                result.update(ttlMs=0, cacheScope="private")
        return {"jsonrpc": "2.0", "id": request["id"], "result": result}

    def call(self, name: str, args: object) -> dict[str, object]:
        text = json.dumps(args, sort_keys=True)
        if name == "write_note" and self.notes:
            with open(self.notes, "a", encoding="utf-8") as out:
                out.write(text + "\n")
            if isinstance(args, dict) and args.get("hang"):  # a write that is killed while it runs
                time.sleep(3600)
        elif name == "ask_client":
            self.asked += 1
            ask_id = f"ask-{self.asked}"
            self.send({"jsonrpc": "2.0", "id": ask_id, "method": "roots/list"})
            for line in sys.stdin:  # wait for the client's answer, serving the rest meanwhile
                reply = json.loads(line) if line.strip() else None
                if isinstance(reply, dict) and reply.get("id") == ask_id and "method" not in reply:
                    text = json.dumps(reply.get("result"), sort_keys=True)
                    break
                self.handle(line)
        elif name == "touch":
            for uri in self.subscribed:
                self.send({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}})
            text = json.dumps({"level": self.level, "subscribed": self.subscribed}, sort_keys=True)
        elif name == "blob" and isinstance(args, dict):  # a large result: `size` bytes of text
            text = "x" * int(args.get("size", 0))
        elif name == "tick":
            self.ticks += 1
            text = str(self.ticks)
        elif name == "forge" and isinstance(args, dict):
            self.send({"jsonrpc": "2.0", "id": args.get("target"), "result": {
                "content": [{"type": "text", "text": "forged"}], "isError": False}})
        elif name == "crash":
            sys.exit(3)
        elif name == "noisy":
            sys.stdout.write("this is not JSON\n")
            self.send({"jsonrpc": "2.0", "method": "notifications/message",
                       "params": {"level": "info", "data": "noisy was called"}})
        return {"content": [{"type": "text", "text": f"{name} {text}"}], "isError": False}

    def resource_request(self, request_id: object, method: str, params: dict[str, object]) -> dict[str, object]:
        """--resources: the notes' listing, a subscription (to a note only), an unsubscribe, a logging level."""
        if method == "resources/list":
            return {"jsonrpc": "2.0", "id": request_id, "result": {"resources": [
                {"uri": uri, "name": uri[7:], "mimeType": "text/plain"} for uri in NOTES]}}
        if method == "logging/setLevel":
            self.level = str(params.get("level"))
        elif method == "resources/unsubscribe":
            self.subscribed = [uri for uri in self.subscribed if uri != params.get("uri")]
        elif params.get("uri") not in NOTES:
            return {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602,
                                                                  "message": f"Unknown resource: {params.get('uri')}"}}
        elif params["uri"] not in self.subscribed:
            self.subscribed.append(str(params["uri"]))
        return {"jsonrpc": "2.0", "id": request_id, "result": {}}

    def serve(self) -> None:
        for line in sys.stdin:
            self.handle(line)

    def handle(self, line: str) -> None:
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError:
            self.send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
            return
        if isinstance(message, list):
            replies = [reply for item in message if (reply := self.answer(item)) is not None]
            if replies:
                self.send(replies)
        elif isinstance(message, dict) and "method" in message:
            reply = self.answer(message)
            if reply is not None:
                self.send(reply)

    def hold(self, request_id: object) -> None:
        """Serve everything else until the client cancels `request_id`; then never answer it."""
        if self.began is not None:
            with open(self.began, "a", encoding="utf-8") as began:
                began.write(f"hold {json.dumps(request_id)}\n")
        for line in sys.stdin:
            message = json.loads(line) if line.strip() else None
            if (isinstance(message, dict) and message.get("method") == "notifications/cancelled"
                    and (message.get("params") or {}).get("requestId") == request_id):
                return
            self.handle(line)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--description", default="Echo the text back.")
    parser.add_argument("--notes")
    parser.add_argument("--odd", action="store_true")
    parser.add_argument("--resources", action="store_true")
    parser.add_argument("--began", help="append `hold ID` as each held call begins")
    args = parser.parse_args()
    TinyServer(args.description, args.notes, args.odd, args.resources, args.began).serve()


if __name__ == "__main__":
    main()
