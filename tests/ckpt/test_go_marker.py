"""The Megatron persister's start signal (_dcp_persist.GO): a persister waits for its request's
function to say go for that save, and no longer than it was told; a marker of another save, or a
FIFO planted under the marker's name, never starts it early nor blocks it."""
import os
import tempfile
import time
import unittest

from xtimer.ckpt._dcp_persist import GO, say_go, wait_go


class GoMarker(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="xtimer-go-")
        self.folder = self.dir.name

    def tearDown(self):
        self.dir.cleanup()

    def marker(self, rank):
        return os.path.join(self.folder, GO % rank)

    def test_go_said_before_the_wait_starts_it_and_is_removed(self):
        say_go(self.folder, 3, 17)
        self.assertTrue(os.path.exists(self.marker(3)))
        waited = time.monotonic()
        wait_go(self.folder, 3, 17, within=600)  # a missed marker would wait the 600 s out
        self.assertLess(time.monotonic() - waited, 300)
        self.assertFalse(os.path.exists(self.marker(3)))
        self.assertEqual(os.listdir(self.folder), [])  # nothing left, no temporary file either

    def test_without_go_it_waits_as_long_as_told_and_no_longer(self):
        waited = time.monotonic()
        wait_go(self.folder, 0, 5, within=0.3)
        self.assertGreaterEqual(time.monotonic() - waited, 0.3)

    def test_the_go_of_another_save_or_rank_does_not_count(self):
        say_go(self.folder, 0, 4)  # the previous save's
        say_go(self.folder, 1, 5)  # another rank's
        waited = time.monotonic()
        wait_go(self.folder, 0, 5, within=0.3)
        self.assertGreaterEqual(time.monotonic() - waited, 0.3)
        self.assertTrue(os.path.exists(self.marker(1)))

    def test_a_fifo_under_the_markers_name_neither_blocks_nor_starts_it(self):
        os.mkfifo(self.marker(2))
        waited = time.monotonic()
        wait_go(self.folder, 2, 9, within=0.3)  # an open of the FIFO for reading would block
        self.assertGreaterEqual(time.monotonic() - waited, 0.3)


if __name__ == "__main__":
    unittest.main()
