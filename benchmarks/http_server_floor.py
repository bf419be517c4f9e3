"""What uvicorn's ASGI path costs a request, against a bare asyncio protocol answering the same bytes.

    python benchmarks/http_server_floor.py [--calls N] [--rounds K]

Needs uvicorn with httptools (the `http` extra). Two servers, each a child process with one event loop
on a listening socket (TCP_NODELAY), answer every POST with the same 79-byte JSON-RPC result:

- `asgi`: uvicorn's httptools protocol (as `mcp-proxy --listen` runs it) and a minimal ASGI app that
  reads the headers into a dict, awaits the body and sends the answer (`http.response.start`, then
  `http.response.body`): the per-request machinery the listener pays before its own work;
- `raw`: an `asyncio.Protocol` that splits the head at its blank line, reads the header fields and
  Content-Length, and writes the answer from a task made for the request (one task a request, as the
  ASGI path has).

One client (a blocking socket, keep-alive, one request at a time, the request written in one piece) calls
each server in turn, `--calls` timed calls a round after 500 untimed ones. For each round and server: the
server's CPU time a request (user + system, from /proc) and the round trip at p50. The difference of the
two servers' CPU a request is what a listener with no ASGI layer would save at most, before any of its own
work. Last, in this process, the CPU time of an event-loop iteration with nothing to wait for and of a task
made and run (`loop_costs`), to price the iterations and tasks a call could lose. No target: this measures
where the HTTP hop's time goes (benchmarks/README.md, issue 39 item 7).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mcp_http_listen import cpu_seconds  # noqa: E402

ANSWER = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}]}}'
BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}'
REQUEST = (b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
           b"accept: application/json, text/event-stream\r\nmcp-session-id: bench\r\ncontent-length: %d\r\n\r\n"
           % len(BODY) + BODY)
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(ANSWER)


async def _asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    assert headers and body
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ANSWER))]})
    await send({"type": "http.response.body", "body": ANSWER})


class _Raw(asyncio.Protocol):
    def __init__(self) -> None:
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: Any) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while (end := self._buffer.find(b"\r\n\r\n")) >= 0:
            fields = {}
            for line in self._buffer[:end].decode("latin-1").split("\r\n")[1:]:
                name, _, value = line.partition(":")
                fields[name.strip().lower()] = value.strip()
            length = int(fields.get("content-length", "0"))
            if len(self._buffer) < end + 4 + length:
                return
            body = self._buffer[end + 4:end + 4 + length]
            self._buffer = self._buffer[end + 4 + length:]
            asyncio.get_running_loop().create_task(self._answer(body))

    async def _answer(self, body: bytes) -> None:
        assert body and self._transport is not None
        self._transport.write(HEAD + ANSWER)


def serve(mode: str) -> None:
    """The server of `mode` on a free port of 127.0.0.1; prints the port, serves until killed."""
    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    print(sock.getsockname()[1], flush=True)

    async def main() -> None:
        if mode == "raw":
            server = await asyncio.get_running_loop().create_server(_Raw, sock=sock)
            await server.serve_forever()
            return
        import uvicorn

        config = uvicorn.Config(_asgi_app, log_level="critical", access_log=False, lifespan="off", ws="none",
                                http="httptools", interface="asgi3")
        await uvicorn.Server(config).serve(sockets=[sock])

    asyncio.run(main())


def _call(connection: socket.socket) -> None:
    connection.sendall(REQUEST)
    got = b""
    while not got.endswith(ANSWER):
        chunk = connection.recv(65536)
        if not chunk:
            raise SystemExit("error: the server closed the connection")
        got += chunk


def measure(pid: int, port: int, calls: int) -> tuple[float, float]:
    """The server's CPU seconds a request and the round trip's p50, over `calls` timed calls."""
    with socket.create_connection(("127.0.0.1", port)) as connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(500):
            _call(connection)
        times = []
        before = cpu_seconds(pid)
        for _ in range(calls):
            start = time.perf_counter()
            _call(connection)
            times.append(time.perf_counter() - start)
        used = cpu_seconds(pid) - before
    return used / calls, statistics.median(times)


def loop_costs(count: int = 200_000) -> tuple[float, float]:
    """CPU seconds of one event-loop iteration with nothing to wait for (a chain of `call_soon` callbacks,
    each scheduling the next: one `epoll` poll and one callback an iteration), and of a task made and run
    to its end (a coroutine that awaits nothing)."""

    async def measure() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        left = [count]

        def step() -> None:
            left[0] -= 1
            if left[0]:
                loop.call_soon(step)
            else:
                done.set_result(None)

        start = time.process_time()
        loop.call_soon(step)
        await done
        iteration = (time.process_time() - start) / count

        async def nothing() -> None:
            pass

        start = time.process_time()
        for _ in range(count // 10):
            await loop.create_task(nothing())
        return iteration, (time.process_time() - start) / (count // 10)

    return asyncio.run(measure())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", choices=("raw", "asgi"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0
    servers = {}
    try:
        for mode in ("asgi", "raw"):
            process = subprocess.Popen([sys.executable, __file__, "--serve", mode], stdout=subprocess.PIPE)
            assert process.stdout is not None
            servers[mode] = (process, int(process.stdout.readline()))
        print(f"{'round':>5}  {'server':6} {'CPU a request':>14} {'round trip p50':>15}")
        saved = []
        for number in range(1, args.rounds + 1):
            cpu = {}
            for mode, (process, port) in servers.items():
                cpu[mode], p50 = measure(process.pid, port, args.calls)
                print(f"{number:>5}  {mode:6} {cpu[mode] * 1e6:11.1f} us {p50 * 1e6:12.1f} us")
            saved.append(cpu["asgi"] - cpu["raw"])
        print("uvicorn and ASGI over the bare protocol, CPU a request: "
              + " / ".join(f"{value * 1e6:.1f}" for value in saved) + " us")
        iteration, task = loop_costs()
        print(f"an event-loop iteration with nothing to wait for: {iteration * 1e6:.2f} us; "
              f"a task made and run: {task * 1e6:.2f} us")
    finally:
        for process, _ in servers.values():
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
