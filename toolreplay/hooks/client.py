"""The hook's fast command (docs/hooks.md, "The hook server"): what `hook AGENT --print-settings` registers.

    python3 -S .../toolreplay/hooks/client.py AGENT --policy POLICY --records DIR [--redact-key FILE]

AGENT is claude-code or gemini-cli. The agent starts a new process for every hook event. Started without
`site` (`-S`) and as a script, this process loads almost nothing: it hands the event to the hook server of
DIR (toolreplay/hooks/server.py, a process that has the guard loaded already) over the Unix socket
DIR/.toolreplay-hook.sock and prints its answer. The server decides with exactly the code of
`toolreplay hook AGENT`, so the answers and the record are the same bytes.

- No server answers (none yet, or it ended after its idle time): this process starts one in the
  background for the next events and handles this event itself, as `toolreplay hook AGENT` does.
- The server received the event but ended before it answered: the call is blocked (exit 2, a line on
  stderr), because the server may have recorded it already; it is never handled twice.
- The server runs another version of ToolReplay: it stops, and this process handles the event itself.

The protocol, one connection an event: the client sends NUL-separated fields (the protocol tag, the server
identity, the client's working folder, the number of arguments, the arguments) and then the hook input
bytes, and shuts its writing side. The server answers `A` as soon as it has the whole request (from then
on it may record), then the exit code and the length of standard output as decimal numbers each ended by
NUL, standard output and standard error. It answers `V` (and stops) for another identity.
"""

import sys

# Run as a script, Python put this file's folder (the package's cli/) first on the path: the folder that
# holds the package goes there instead, so that `toolreplay` imports from where this file is.
_HERE = __file__ if __file__.startswith("/") else __import__("posix").getcwd() + "/" + __file__
PACKAGE_PARENT = _HERE.rsplit("/", 3)[0]
if __name__ == "__main__":
    sys.path[0] = PACKAGE_PARENT

import posix  # noqa: E402 - after the path: the operating system's calls, loaded already (no `os`)

PROTOCOL = b"toolreplay-hook/1"
SOCKET_NAME = ".toolreplay-hook.sock"
# How long a client waits for the server's answer once the server has the event; then it blocks the call
# (Claude Code's and Gemini CLI's own limit for a hook is 60 s: an answer must come before that, and a deny
# is safer than a timeout, which neither counts as a refusal).
ANSWER_SECONDS = 50.0
_OPTIONS = ("--policy", "--records", "--redact-key")
# The longest Unix socket path (sun_path holds 108 bytes on Linux, 104 on macOS, with its final NUL): a
# records folder deeper than that has no server, and every event is handled in its own process.
MAX_SOCKET_PATH = 103


def identity() -> bytes:
    """What a server and its clients must share: the ToolReplay version and where it is installed."""
    from toolreplay import __version__

    return f"{__version__} {PACKAGE_PARENT}".encode()


def plain_options(arguments: list[str]) -> dict[str, str] | None:
    """An agent (`claude-code`, `gemini-cli`) and the options the hook takes, each once with a value; None for
    anything else."""
    if arguments[:1] not in (["claude-code"], ["gemini-cli"]) or len(arguments) % 2 == 0:
        return None
    options: dict[str, str] = {}
    for name, value in zip(arguments[1::2], arguments[2::2], strict=True):
        if name not in _OPTIONS or name in options or value.startswith("-") or "\0" in value:
            return None
        options[name] = value
    return options if "--policy" in options and "--records" in options else None


def socket_path(records: str, cwd: str) -> str:
    """DIR/.toolreplay-hook.sock, DIR taken from the client's working folder when relative."""
    folder = records if records.startswith("/") else cwd.rstrip("/") + "/" + records
    return folder.rstrip("/") + "/" + SOCKET_NAME


def main(arguments: list[str]) -> int:
    options = plain_options(arguments)
    if options is None:  # help, --print-settings, a typo: the full command line answers
        return _in_process(arguments, None)
    data = sys.stdin.buffer.read()
    cwd = posix.getcwd()
    path = socket_path(options["--records"], cwd)
    if len(path.encode("utf-8", "surrogateescape")) > MAX_SOCKET_PATH:  # no server can listen there
        return _in_process(arguments, data)
    import _socket

    connection = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            connection.connect(path)
        except OSError:  # no server: this process decides, and starts one for the next events
            _start_server(options["--records"], cwd)
            return _in_process(arguments, data)
        connection.settimeout(ANSWER_SECONDS)
        fields = [PROTOCOL, identity(), cwd.encode(), str(len(arguments)).encode()]
        fields += [argument.encode("utf-8", "surrogateescape") for argument in arguments]
        received: list[bytes] = []
        failure: OSError | None = None
        try:
            connection.sendall(b"\0".join(fields) + b"\0" + data)
            connection.shutdown(_socket.SHUT_WR)
            while chunk := connection.recv(1 << 16):
                received.append(chunk)
        except OSError as exc:
            failure = exc
    finally:
        connection.close()
    return _answer(b"".join(received), failure, arguments, data)


def _answer(answer: bytes, failure: OSError | None, arguments: list[str], data: bytes) -> int:
    """Print the server's answer; handle the event here when the server did not take it; else block."""
    if answer[:1] == b"A" and failure is None:
        parsed = _parse(answer[1:])
        if parsed is not None:
            code, out, err = parsed
            sys.stdout.buffer.write(out)
            sys.stdout.flush()
            sys.stderr.buffer.write(err)
            return code
    if answer in (b"", b"V") and not isinstance(failure, TimeoutError):
        # the server did not take the event (it was stopping, ended, or runs another version): nothing of it
        # is recorded, so this process handles it
        return _in_process(arguments, data)
    # the server may have recorded the event (or may still): never handle it twice; the agent blocks the
    # call and shows the line
    if isinstance(failure, TimeoutError):
        why = f"the hook server did not answer within {ANSWER_SECONDS:.0f} s"
    elif failure is not None:
        why = f"the hook server's answer was cut ({failure.strerror or failure})"
    else:
        why = "the hook server ended before it answered"
    sys.stderr.write(f"error: toolreplay hook: {why}; the call is blocked\n")
    return 2


def _parse(body: bytes) -> tuple[int, bytes, bytes] | None:
    parts = body.split(b"\0", 2)
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    size = int(parts[1])
    if len(parts[2]) < size:
        return None
    return int(parts[0]), parts[2][:size], parts[2][size:]


def _in_process(arguments: list[str], data: bytes | None) -> int:
    """The event handled here, by the command line `toolreplay hook` itself."""
    from toolreplay.cli import main as command_line
    from toolreplay.cli._io import IO

    io = IO.from_sys()
    if data is not None:
        import io as streams

        io.stdin = streams.BytesIO(data)
    return command_line(["hook", *arguments], io)


def _start_server(records: str, cwd: str) -> None:
    """Start DIR's hook server, detached: its own session, standard streams on /dev/null (the agent waits
    for the hook's output to close), in the client's working folder (DIR may be relative)."""
    try:
        pid = posix.fork()
    except OSError:
        return  # no server: every event is handled in its own process, as without one
    if pid:
        try:
            posix.waitpid(pid, 0)
        except OSError:
            pass
        return
    try:
        posix.setsid()
        if posix.fork() == 0:
            null = posix.open("/dev/null", posix.O_RDWR)
            for stream in (0, 1, 2):
                posix.dup2(null, stream)
            posix.closerange(3, 1 << 16)
            posix.execv(sys.executable, [sys.executable, "-S", _HERE, "--serve", records])
    except BaseException:  # noqa: S110 - the child ends here whatever happens; the parent goes on without a server
        pass
    posix._exit(0)


def run(arguments: list[str]) -> None:
    """The script's whole run: serve DIR (`--serve DIR`, how a client starts a server) or answer one event."""
    if arguments[:1] == ["--serve"] and len(arguments) == 2:
        from toolreplay.hooks.server import serve

        sys.exit(serve(arguments[1]))
    try:
        code = main(arguments)
    except Exception as exc:  # noqa: BLE001 - any status but 0 and 2 lets the agent run the tool: block it
        sys.stderr.write(f"error: toolreplay hook: internal error ({type(exc).__name__}); the call is blocked\n")
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    run(sys.argv[1:])
