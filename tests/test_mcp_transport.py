"""The proxy's client end on its own streams (toolreplay.mcp.transport.StdioClient): one thread at a time
reads and hands on a line, in order; a line kept by its thread (`hand_over`) lets another thread read on."""

from __future__ import annotations

import os
import queue
import threading
import unittest

from toolreplay.mcp.transport import StdioClient


class HandOverTest(unittest.TestCase):
    def setUp(self) -> None:
        read, write = os.pipe()
        self.reader = open(read, "rb")
        self.writer = open(write, "wb")
        self.addCleanup(self.reader.close)
        self.addCleanup(lambda: self.writer.closed or self.writer.close())
        sink = open(os.devnull, "wb")
        self.addCleanup(sink.close)
        self.client = StdioClient(self.reader, sink)
        self.seen: queue.SimpleQueue[tuple[bytes, bool]] = queue.SimpleQueue()
        self.ended: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.release = threading.Event()

    def on_line(self, line: bytes) -> None:
        kept = line.startswith(b"keep") and self.client.hand_over()
        self.seen.put((line, kept))
        if kept:  # as a call that waits for its server: the next lines are read meanwhile
            self.assertTrue(self.release.wait(timeout=5))

    def send(self, data: bytes) -> None:
        self.writer.write(data)
        self.writer.flush()

    def test_a_kept_line_lets_the_next_ones_be_read_meanwhile_in_order(self) -> None:
        self.client.start(self.on_line, self.ended.put)
        self.send(b"keep 1\n")
        self.assertEqual(self.seen.get(timeout=5), (b"keep 1\n", True))
        self.send(b"ping 2\n\nkeep 3\nping 4\n")  # read while the first is kept; a blank line is skipped
        self.assertEqual([self.seen.get(timeout=5) for _ in range(3)],
                         [(b"ping 2\n", False), (b"keep 3\n", True), (b"ping 4\n", False)])
        self.release.set()
        self.writer.close()
        self.assertEqual(self.ended.get(timeout=5), "client closed its input")
        self.assertTrue(self.seen.empty())
        self.assertTrue(self.ended.empty())  # said once, by one of the threads

    def test_only_the_reading_thread_may_keep_its_line(self) -> None:
        self.assertFalse(self.client.hand_over())  # not from a thread that is not reading
        self.client.start(self.on_line, self.ended.put)
        self.send(b"ping\n")
        self.assertEqual(self.seen.get(timeout=5), (b"ping\n", False))
        self.assertFalse(self.client.hand_over())
        self.writer.close()
        self.assertEqual(self.ended.get(timeout=5), "client closed its input")


if __name__ == "__main__":
    unittest.main()
