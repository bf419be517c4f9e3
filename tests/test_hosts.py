"""`toolreplay.guard.hosts.is_loopback`: the one reading of "this machine only" every listener uses."""

from __future__ import annotations

import unittest

from toolreplay.guard.hosts import is_loopback


class LoopbackTest(unittest.TestCase):
    def test_table(self) -> None:
        for host, expected in (("localhost", True), ("LOCALHOST", True), ("127.0.0.1", True), ("127.8.9.10", True),
                               ("::1", True), ("[::1]", True), ("0.0.0.0", False), ("::", False),
                               ("192.168.1.2", False), ("localhost.example", False), ("", False),
                               ("example.com", False)):
            with self.subTest(host=host):
                self.assertIs(is_loopback(host), expected)


if __name__ == "__main__":
    unittest.main()
