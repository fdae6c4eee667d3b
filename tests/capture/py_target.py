"""Target process for py_gil_test.py: its main thread blocks in a C call that HOLDS the GIL.

argv: LIB DIR. Prints "ready" when about to block; reads one byte from stdin to finish."""
import ctypes
import sys
import threading
import time

lib_path, out_dir = sys.argv[1], sys.argv[2]
lib = ctypes.CDLL(lib_path)
lib.xtc_start.argtypes = [ctypes.c_char_p]
assert lib.xtc_start(out_dir.encode()) == 1, "dumper did not start"
gil_holding = ctypes.PyDLL(lib_path)  # PyDLL: the GIL is not released around the call
gil_holding.xtc_read_byte_holding_gil.argtypes = [ctypes.c_int]

stop = False


def worker_sleeping():
    while not stop:
        time.sleep(0.005)


def stuck_with_gil():
    print("ready", flush=True)
    return gil_holding.xtc_read_byte_holding_gil(0)


worker = threading.Thread(target=worker_sleeping, name="py-worker \u00e9\u5de5\U0001f9f5")  # a str of 4-byte characters
worker.start()
got = stuck_with_gil()
stop = True
worker.join()
print("done", got, flush=True)
sys.exit(0 if got == ord("x") else 1)
