"""toolreplay.mcp.http.oauth: a server's WWW-Authenticate rewritten to name the listener's metadata, and
its protected resource metadata passed on with the listener's URL, or refused (another resource, not
JSON, too large, another host)."""

from __future__ import annotations

import asyncio
import http.server
import importlib.util
import json
import threading
import unittest
from typing import Any

from toolreplay.mcp.http.oauth import MAX_METADATA, MetadataError, fetch_metadata, metadata_path, rewrite_challenge

HAVE_HTTPX = importlib.util.find_spec("httpx") is not None
OWN = "http://127.0.0.1:8765/.well-known/oauth-protected-resource/mcp"
SERVER = "https://mcp.example.com/mcp"


class ChallengeTest(unittest.TestCase):
    def test_rewrite_challenge(self) -> None:
        named = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        cases = [
            (f'Bearer error="invalid_token", resource_metadata="{named}"',
             f'Bearer error="invalid_token", resource_metadata="{OWN}"', named),
            (f'Bearer resource_metadata="{named}", scope="files:read"',
             f'Bearer resource_metadata="{OWN}", scope="files:read"', named),
            # on another host: not fetched (the listener reads the server's own well-known URLs)
            ('Bearer resource_metadata="https://evil.example/meta"', f'Bearer resource_metadata="{OWN}"', None),
            ('Bearer resource_metadata="http://mcp.example.com/.well-known/oauth-protected-resource"',
             f'Bearer resource_metadata="{OWN}"', None),  # another scheme is another origin
            ("Bearer", f'Bearer resource_metadata="{OWN}"', None),
            ("", f'Bearer resource_metadata="{OWN}"', None),
            ('Bearer error="insufficient_scope", scope="admin"',
             f'Bearer error="insufficient_scope", scope="admin", resource_metadata="{OWN}"', None),
        ]
        for challenge, rewritten, source in cases:
            with self.subTest(challenge):
                self.assertEqual(rewrite_challenge(challenge, OWN, SERVER), (rewritten, source))

    def test_metadata_path(self) -> None:
        self.assertEqual([metadata_path(path) for path in ("/mcp", "/", "/a/b")], [
            "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource",
            "/.well-known/oauth-protected-resource/a/b"])


class _Metadata(http.server.BaseHTTPRequestHandler):
    documents: dict[str, tuple[int, bytes]] = {}
    asked: list[str] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.asked.append(self.path)
        status, body = self.documents.get(self.path, (404, b"not found"))
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@unittest.skipUnless(HAVE_HTTPX, "httpx (pip install '.[http]' in a ToolReplay checkout)")
class FetchTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metadata)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.resource = self.base + "/mcp"
        _Metadata.documents, _Metadata.asked = {}, []

    def fetch(self, named: str | None = None) -> bytes:
        return asyncio.run(fetch_metadata(self.resource, named, "http://127.0.0.1:8765/mcp"))

    def serve(self, path: str, document: Any, status: int = 200) -> None:
        _Metadata.documents[path] = (status, document if isinstance(document, bytes) else json.dumps(document).encode())

    def test_the_servers_metadata_with_the_listeners_url(self) -> None:
        self.serve("/.well-known/oauth-protected-resource", {"resource": self.resource + "/",
                                                              "authorization_servers": ["https://auth.example/"]})
        self.assertEqual(json.loads(self.fetch()), {"resource": "http://127.0.0.1:8765/mcp",
                                                    "authorization_servers": ["https://auth.example/"]})
        # the path-suffixed URL first (RFC 9728), then the root one
        self.assertEqual(_Metadata.asked, ["/.well-known/oauth-protected-resource/mcp",
                                           "/.well-known/oauth-protected-resource"])

    def test_the_url_the_401_named_comes_first(self) -> None:
        self.serve("/meta", {"resource": self.resource, "scopes_supported": ["a"]})
        self.assertEqual(json.loads(self.fetch(self.base + "/meta")),
                         {"resource": "http://127.0.0.1:8765/mcp", "scopes_supported": ["a"]})
        self.assertEqual(_Metadata.asked, ["/meta"])

    def test_what_is_refused(self) -> None:
        path = "/.well-known/oauth-protected-resource/mcp"
        cases = [
            ({"resource": "https://elsewhere.example/mcp"}, 200,
             "the server's metadata names another resource than the server"),
            (b"not json", 200, "the server's metadata is not JSON"),
            ([1, 2], 200, 'the server\'s metadata has no "resource"'),
            ({"resource": self.resource, "pad": "x" * MAX_METADATA}, 200,
             f"the server's metadata is over {MAX_METADATA} bytes"),
            ({"resource": self.resource}, 500, "the server answered HTTP 500 for its metadata"),
        ]
        for document, status, message in cases:
            with self.subTest(message):
                self.serve(path, document, status)
                with self.assertRaises(MetadataError) as caught:
                    self.fetch()
                self.assertEqual(str(caught.exception), message)
        del _Metadata.documents[path]
        with self.assertRaises(MetadataError) as caught:
            self.fetch()
        self.assertEqual(str(caught.exception), "the server publishes no protected resource metadata")


if __name__ == "__main__":
    unittest.main()
