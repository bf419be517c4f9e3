"""The hook's fast command (docs/hooks.md, "The hook server"): what `hook AGENT --print-settings` registers.

    python3 -S .../toolreplay/hooks/client.py AGENT --policy POLICY --records DIR [--redact-key FILE]

AGENT is claude-code, gemini-cli or codex. The agent starts a new process for every hook event. Started without
`site` (`-S`) and as a script, this process loads almost nothing: it hands the event to the hook server of
DIR (toolreplay/hooks/server.py, a process that has the guard loaded already) over the Unix socket
DIR/.toolreplay-hook.sock and prints its answer. The server decides with exactly the code of
`toolreplay hook AGENT` (toolreplay/hooks/reply.py), so the answers and the record are the same bytes.

- No server answers (none yet, or it ended after its idle time): this process starts one in the
  background for the next events and decides this event itself, as `toolreplay hook AGENT` does.
- The server received the event but ended before it answered: the call is blocked (exit 2, a line on
  stderr), because the server may have recorded it already; it is never handled twice.
- The server runs another version of ToolReplay: it stops, and this process decides the event itself.
- Only the user's own server is trusted: the socket is used only in a private records folder (the user's or
  root's, not writable by its group or others), only when it is a socket the user owns, and (on Linux) only
  when the process listening on it is the user's. Otherwise this process decides the event itself, and it
  starts no server in a folder that is not private.
- Help, --print-settings, a typo: the full command line answers (`toolreplay hook ...`, run in this
  process's place).

The socket protocol (its names, how a request is framed and an answer read) is toolreplay/hooks/protocol.py.
"""

import sys

# Run as a script, Python put this file's folder (the package's hooks/) first on the path: the folder that
# holds the package goes there instead, so that `toolreplay` imports from where this file is.
_HERE = __file__ if __file__.startswith("/") else __import__("posix").getcwd() + "/" + __file__
PACKAGE_PARENT = _HERE.rsplit("/", 3)[0]
if __name__ == "__main__":
    sys.path[0] = PACKAGE_PARENT

import _socket  # noqa: E402 - after the path: the socket's own calls (no `socket`)
import posix  # noqa: E402 - the operating system's calls, loaded already (no `os`)

from toolreplay.hooks.protocol import (  # noqa: E402 - after the path
    ANSWER_SECONDS,
    MAX_SOCKET_PATH,
    PROTOCOL,
    SOCKET_NAME,
    answer_seconds,
    frame_request,
    identity,
    is_own_socket,
    is_private_folder,
    parse_answer,
    plain_options,
    socket_path,
)

__all__ = ["ANSWER_SECONDS", "MAX_SOCKET_PATH", "PROTOCOL", "SOCKET_NAME", "identity", "main", "plain_options",
           "run", "socket_path"]

# The full command line, run in this process's place for anything but the plain options: Python without
# `site`, as this process, and with the package's parent first on the path (as here), not the working folder.
_COMMAND_LINE = ("import sys; sys.path.insert(0, sys.argv.pop(1)); from toolreplay.cli import entry_point; "
                 "entry_point()")


def main(arguments: list[str]) -> int:
    """Answer one hook event: through the records folder's own server, or decided here."""
    options = plain_options(arguments)
    if options is None:  # help, --print-settings, a typo: the full command line answers, in this process's place
        posix.execv(sys.executable, [sys.executable, "-S", "-P", "-c", _COMMAND_LINE, PACKAGE_PARENT, "hook",
                                      *arguments])
    data = sys.stdin.buffer.read()
    cwd = posix.getcwd()
    path = socket_path(options["--records"], cwd)
    if len(path.encode("utf-8", "surrogateescape")) > MAX_SOCKET_PATH:  # no server can listen there
        return _decide_here(options, arguments[0], data)
    if not is_private_folder(path.rsplit("/", 1)[0]):  # others could have put the socket there: no server
        return _decide_here(options, arguments[0], data)
    own = is_own_socket(path)
    if not own:  # nothing there: no server yet; or something that is not this user's socket: not used
        if own is None:
            _start_server(options["--records"], cwd)
        return _decide_here(options, arguments[0], data)
    connection = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            connection.connect(path)
        except OSError:  # no server (a socket left behind): this process decides, and starts one for the next events
            _start_server(options["--records"], cwd)
            return _decide_here(options, arguments[0], data)
        if not _is_own_peer(connection):  # the socket was replaced by another user's: nothing is sent
            return _decide_here(options, arguments[0], data)
        connection.settimeout(answer_seconds(options))  # a call waiting in the inbox: its timeout more
        received: list[bytes] = []
        failure: OSError | None = None
        try:
            connection.sendall(frame_request(arguments, cwd, data))
            connection.shutdown(_socket.SHUT_WR)
            while chunk := connection.recv(1 << 16):
                received.append(chunk)
        except OSError as exc:
            failure = exc
    finally:
        connection.close()
    return _answer(b"".join(received), failure, options, arguments[0], data)


def _is_own_peer(connection: _socket.socket) -> bool:
    """Whether the process listening on the socket runs as this user (Linux's SO_PEERCRED: pid, uid, gid as
    native ints); True where the system does not say (the socket's owner and folder were checked)."""
    option = getattr(_socket, "SO_PEERCRED", None)
    if option is None:
        return True
    try:
        credentials = connection.getsockopt(_socket.SOL_SOCKET, option, 12)
    except OSError:
        return False
    return len(credentials) == 12 and int.from_bytes(credentials[4:8], sys.byteorder) == posix.geteuid()


def _answer(answer: bytes, failure: OSError | None, options: dict[str, str], agent: str, data: bytes) -> int:
    """Print the server's answer; decide the event here when the server did not take it; else block."""
    if answer[:1] == b"A" and failure is None:
        parsed = parse_answer(answer[1:])
        if parsed is not None:
            code, out, err = parsed
            sys.stdout.buffer.write(out)
            sys.stdout.flush()
            sys.stderr.buffer.write(err)
            return code
    if answer in (b"", b"V") and not isinstance(failure, TimeoutError):
        # the server did not take the event (it was stopping, ended, or runs another version): nothing of it
        # is recorded, so this process decides it
        return _decide_here(options, agent, data)
    # the server may have recorded the event (or may still): never handle it twice; the agent blocks the
    # call and shows the line
    if isinstance(failure, TimeoutError):
        why = f"the hook server did not answer within {answer_seconds(options):.0f} s"
    elif failure is not None:
        why = f"the hook server's answer was cut ({failure.strerror or failure})"
    else:
        why = "the hook server ended before it answered"
    sys.stderr.write(f"error: toolreplay hook: {why}; the call is blocked\n")
    return 2


def _decide_here(options: dict[str, str], agent: str, data: bytes) -> int:
    """The event decided and recorded in this process, by the hooks' own core (as `toolreplay hook` does)."""
    from toolreplay.hooks.reply import reply_to_event

    reply = reply_to_event(data, options["--policy"], options["--records"], options.get("--redact-key"), agent,
                           options.get("--inbox"), options.get("--inbox-timeout"))
    sys.stdout.write(reply.stdout)
    sys.stdout.flush()
    sys.stderr.write(reply.stderr)
    return reply.code


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
