"""The restricted unpickler (xtimer.ckpt._safe_pickle) on the forms Python 3.11 and torch write:
an allowed enum's members (pickled as getattr(TheEnum, "NAME")), torch's layouts (through
torch.serialization._get_layout) and memory formats (under torch._utils) load; getattr on
anything but an allowed enum's member, and an enum that was not allowed, are refused with
UnsafePickle naming them, and so is a function that would run code."""
import enum
import io
import os
import pickle
import unittest

import torch

from xtimer.ckpt import _safe_pickle


class Colour(enum.Enum):
    RED = 1
    GREEN = 2


class NotAllowed(enum.Enum):
    A = 1


class Plain:
    pass


_safe_pickle.allow(Colour, Plain)


def _reduce(func, *args):
    """A pickle of func(*args), written by hand (protocol 2)."""

    class R:
        def __reduce__(self):
            return (func, args)

    return pickle.dumps(R(), protocol=2)


class SafePickleTypes(unittest.TestCase):
    def load(self, data):
        return _safe_pickle.loads(data, "the test's pickle")

    def test_allowed_enum_members_load(self):
        data = pickle.dumps([Colour.RED, Colour.GREEN], protocol=pickle.HIGHEST_PROTOCOL)
        self.assertEqual(self.load(data), [Colour.RED, Colour.GREEN])

    def test_layouts_and_memory_formats_load(self):
        values = [torch.strided, torch.sparse_coo, torch.float16]
        for proto in (2, pickle.HIGHEST_PROTOCOL):
            self.assertEqual(self.load(pickle.dumps(values, protocol=proto)), values)
        # A memory format pickles by its dotted name, so only from protocol 4.
        formats = [torch.contiguous_format, torch.channels_last]
        self.assertEqual(self.load(pickle.dumps(formats, protocol=pickle.HIGHEST_PROTOCOL)), formats)

    def test_enum_not_allowed_is_refused(self):
        with self.assertRaisesRegex(_safe_pickle.UnsafePickle, "NotAllowed"):
            self.load(pickle.dumps(NotAllowed.A, protocol=pickle.HIGHEST_PROTOCOL))

    def test_getattr_beyond_enum_members_is_refused(self):
        for target, name in ((Colour, "__class__"), (Colour, "_member_map_"), (Plain, "__init__"), (Colour, "mro")):
            with self.subTest(name=name):
                with self.assertRaisesRegex(_safe_pickle.UnsafePickle, "getattr"):
                    self.load(_reduce(getattr, target, name))
        with self.assertRaises(_safe_pickle.UnsafePickle):  # getattr(x, name, default)
            self.load(_reduce(getattr, Colour, "RED", None))

    def test_code_is_not_run(self):
        mark = os.path.join(os.environ.get("TMPDIR", "/tmp"), "xtimer-safe-pickle-%d" % os.getpid())
        with self.assertRaisesRegex(_safe_pickle.UnsafePickle, "posix.system"):
            self.load(_reduce(os.system, "touch " + mark))
        self.assertFalse(os.path.exists(mark))
        with self.assertRaisesRegex(_safe_pickle.UnsafePickle, "torch.serialization._get_layout|not a readable"):
            self.load(_reduce(torch.serialization._get_layout, ["not", "a", "name"]))
        with self.assertRaisesRegex(_safe_pickle.UnsafePickle, "not a readable"):
            _safe_pickle.load(io.BytesIO(b"\x80\x05 garbage"), "the test's pickle")


if __name__ == "__main__":
    unittest.main()
