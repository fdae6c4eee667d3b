"""Target of py_spy_compare.py: named threads parked where Python stacks are interesting.

  sleeper     in time.sleep
  c-ext       in a C extension call (socket.recv on a socketpair nobody writes to)
  generator   inside a generator's frame, waiting on an Event
  asyncio     inside a coroutine of a running event loop, in a blocking call
  autograd    in CPU autograd backward: a custom Function's backward waits (needs torch)
  MainThread  reading stdin

Prints "ready TORCH" (TORCH: 1 with the autograd thread, 0 without) once every thread is parked;
ends when stdin closes."""
import asyncio
import socket
import sys
import threading
import time

parked = []  # one Event per thread, set just before it blocks
release = threading.Event()


def parking():
    e = threading.Event()
    parked.append(e)
    return e


def sleeper(ready):
    ready.set()
    while True:
        time.sleep(3600)


def c_extension(ready):
    a, b = socket.socketpair()
    ready.set()
    a.recv(1)


def waiting_generator(ready):
    ready.set()
    while True:
        release.wait()
        yield 1


def consume(ready):
    for _ in waiting_generator(ready):
        pass


def blocking_in_coroutine(ready):
    ready.set()
    release.wait()


async def handler(ready):
    await asyncio.sleep(0)
    blocking_in_coroutine(ready)


async def serve(ready):
    await asyncio.gather(handler(ready))


def event_loop(ready):
    asyncio.run(serve(ready))


def autograd(ready):
    import torch

    class Stuck(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            ready.set()
            release.wait()
            return grad * 2

    x = torch.ones(4, requires_grad=True)
    loss = Stuck.apply(x).sum()
    loss.backward()


def main():
    targets = [("sleeper", sleeper), ("c-ext", c_extension), ("generator", consume), ("asyncio", event_loop)]
    try:
        import torch  # noqa: F401

        targets.append(("autograd", autograd))
        have_torch = 1
    except ImportError:
        have_torch = 0
    for name, fn in targets:
        threading.Thread(target=fn, args=(parking(),), name=name, daemon=True).start()
    for e in parked:
        e.wait()
    time.sleep(0.3)  # from ready.set() into the blocking call
    print("ready", have_torch, flush=True)
    sys.stdin.read()


main()
