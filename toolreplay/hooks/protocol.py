"""The hook server's socket protocol (docs/hooks.md, "The hook server"): its names, its framing, and who may be
trusted with it. Both the fast client (run by `python -S`) and the server import this module, so it imports
nothing but `posix` (loaded already at startup) and the package's version.

One connection an event. The client sends NUL-separated fields (the protocol tag, the server identity, the
client's working folder, the number of arguments, the arguments) and then the hook input bytes, and shuts
its writing side. The server answers `A` as soon as it has the whole request (from then on it may record),
then the exit code and the length of standard output as decimal numbers each ended by NUL, standard output
and standard error. It answers `V` (and stops) for another identity.

Trust: a records folder is private when it is owned by the user (or root) and neither its group nor others
can write it; only there does a server listen, and only there does a client connect, to a socket the user
owns, whose listening process (its peer credentials, on Linux) is the user's.
"""

import posix

from toolreplay import __version__

__all__ = ["ANSWER_SECONDS", "DEFAULT_INBOX_TIMEOUT", "MAX_INBOX_TIMEOUT", "MAX_SOCKET_PATH", "NOT_PATHS",
           "PROTOCOL", "SOCKET_NAME", "answer_seconds", "frame_answer", "inbox_seconds", "frame_request", "identity",
           "is_private_folder", "is_own_socket", "parse_answer", "parse_request", "plain_options", "socket_path"]

PROTOCOL = b"toolreplay-hook/1"
SOCKET_NAME = ".toolreplay-hook.sock"
# How long a client waits for the server's answer once the server has the event; then it blocks the call
# (Claude Code's and Gemini CLI's own limit for a hook is 60 s: an answer must come before that, and a deny
# is safer than a timeout, which neither counts as a refusal). A call that waits in the approvals inbox
# (`--inbox`) is given its inbox timeout more (`answer_seconds`).
ANSWER_SECONDS = 50.0
# Seconds a call waits in the approvals inbox by default: under Gemini CLI's hook timeout (60 s, the shortest of
# the three agents' defaults: Claude Code's and Codex's command hooks get 600 s) and the fast client's wait for
# its server's answer (ANSWER_SECONDS), with room for the hook's own work; at most a day.
DEFAULT_INBOX_TIMEOUT = 40.0
MAX_INBOX_TIMEOUT = 86400.0
# The longest Unix socket path (sun_path holds 108 bytes on Linux, 104 on macOS, with its final NUL): a
# records folder deeper than that has no server, and every event is handled in its own process.
MAX_SOCKET_PATH = 103
_OPTIONS = ("--policy", "--records", "--redact-key", "--inbox", "--inbox-timeout")
# The options that are not a file or folder (a server joins the others to its client's working folder).
NOT_PATHS = ("--inbox-timeout",)
# The package's folder's parent: this file is PARENT/toolreplay/hooks/protocol.py.
_PACKAGE_PARENT = __file__.rsplit("/", 3)[0]
_S_IFMT, _S_IFDIR, _S_IFSOCK = 0o170000, 0o040000, 0o140000


def identity() -> bytes:
    """What a server and its clients must share: the ToolReplay version and where it is installed."""
    return f"{__version__} {_PACKAGE_PARENT}".encode()


def plain_options(arguments: list[str]) -> dict[str, str] | None:
    """An agent (`claude-code`, `gemini-cli`, `codex`) and the options the hook takes, each once with a value;
    None for anything else."""
    if arguments[:1] not in (["claude-code"], ["gemini-cli"], ["codex"]) or len(arguments) % 2 == 0:
        return None
    options: dict[str, str] = {}
    for name, value in zip(arguments[1::2], arguments[2::2], strict=True):
        if name not in _OPTIONS or name in options or value.startswith("-") or "\0" in value:
            return None
        options[name] = value
    return options if "--policy" in options and "--records" in options else None


def answer_seconds(options: dict[str, str]) -> float:
    """How long a client waits for its server's answer: ANSWER_SECONDS, and a call's longest wait in the approvals
    inbox more (its `--inbox-timeout`, else DEFAULT_INBOX_TIMEOUT; a timeout that is no number is refused
    by the server at once)."""
    if "--inbox" not in options:
        return ANSWER_SECONDS
    return ANSWER_SECONDS + (inbox_seconds(options.get("--inbox-timeout")) or 0.0)


def inbox_seconds(text: str | None) -> float | None:
    """The seconds of an `--inbox-timeout` (DEFAULT_INBOX_TIMEOUT when not given); None when it is no number of
    seconds more than 0 and at most MAX_INBOX_TIMEOUT."""
    if text is None:
        return DEFAULT_INBOX_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        return None
    return seconds if 0 < seconds <= MAX_INBOX_TIMEOUT else None


def socket_path(records: str, cwd: str) -> str:
    """DIR/.toolreplay-hook.sock, DIR taken from the client's working folder when relative."""
    folder = records if records.startswith("/") else cwd.rstrip("/") + "/" + records
    return folder.rstrip("/") + "/" + SOCKET_NAME


def is_private_folder(folder: str) -> bool:
    """Whether `folder` is a folder of this user's (or root's) that neither its group nor others can write: no
    one else can put a socket there, or replace this user's."""
    try:
        status = posix.stat(folder)
    except (OSError, ValueError):
        return False
    return (status.st_mode & _S_IFMT == _S_IFDIR and status.st_uid in (posix.geteuid(), 0)
            and not status.st_mode & 0o022)


def is_own_socket(path: str) -> bool | None:
    """Whether `path` is a socket this user owns (not followed if a link); None when there is nothing there."""
    try:
        status = posix.lstat(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return False
    return status.st_mode & _S_IFMT == _S_IFSOCK and status.st_uid == posix.geteuid()


def frame_request(arguments: list[str], cwd: str, data: bytes) -> bytes:
    """The bytes a client sends for one event."""
    fields = [PROTOCOL, identity(), cwd.encode("utf-8", "surrogateescape"), str(len(arguments)).encode()]
    fields += [argument.encode("utf-8", "surrogateescape") for argument in arguments]
    return b"\0".join(fields) + b"\0" + data


def parse_request(request: bytes) -> tuple[bytes, list[str], str, bytes] | None:
    """The identity, arguments, working folder and hook input of a request; None when it is not one."""
    parts = request.split(b"\0", 4)
    if len(parts) != 5 or parts[0] != PROTOCOL or not parts[3].isdigit():
        return None
    count = int(parts[3])
    rest = parts[4].split(b"\0", count)
    if len(rest) != count + 1:
        return None
    arguments = [part.decode("utf-8", "surrogateescape") for part in rest[:count]]
    return parts[1], arguments, parts[2].decode("utf-8", "surrogateescape"), rest[count]


def frame_answer(code: int, out: bytes, err: bytes) -> bytes:
    """What follows the server's `A`: the exit code, standard output and standard error."""
    return b"%d\0%d\0" % (code, len(out)) + out + err


def parse_answer(body: bytes) -> tuple[int, bytes, bytes] | None:
    """The exit code, standard output and standard error after the `A`; None when the answer is cut."""
    parts = body.split(b"\0", 2)
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    size = int(parts[1])
    if len(parts[2]) < size:
        return None
    return int(parts[0]), parts[2][:size], parts[2][size:]
