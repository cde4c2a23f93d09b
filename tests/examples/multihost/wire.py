#!/usr/bin/env python3
"""A link with delay and loss, for kernels without tc's netem (multihost_test.sh).

Joins tap device TAP_A in network namespace NS_A to TAP_B in NS_B: every Ethernet frame read on
one side is written to the other DELAY_MS later, except LOSS_PCT percent of them, dropped at
random. Runs until SIGTERM.

Usage: wire.py NS_A TAP_A NS_B TAP_B DELAY_MS LOSS_PCT
"""
import collections
import ctypes
import fcntl
import os
import random
import select
import signal
import struct
import sys
import time

CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TAP, IFF_NO_PI = 0x0002, 0x1000
libc = ctypes.CDLL(None, use_errno=True)


def open_tap(namespace, name):
    """The tap device `name` of `namespace`, opened non-blocking (this thread enters the namespace)."""
    ns = os.open("/run/netns/" + namespace, os.O_RDONLY)
    if libc.setns(ns, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns " + namespace)
    os.close(ns)
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


def main():
    a = open_tap(sys.argv[1], sys.argv[2])
    b = open_tap(sys.argv[3], sys.argv[4])
    delay, loss = float(sys.argv[5]) / 1000, float(sys.argv[6]) / 100
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    pending = {a: collections.deque(), b: collections.deque()}  # (when, frame) to write to the key
    other = {a: b, b: a}
    while True:
        now = time.monotonic()
        for fd, queue in pending.items():
            while queue and queue[0][0] <= now:
                try:
                    os.write(fd, queue.popleft()[1])
                except OSError:
                    pass  # that side is down: the frame is lost, as on a wire
        due = [q[0][0] for q in pending.values() if q]
        ready, _, _ = select.select([a, b], [], [], max(0.0, min(due) - now) if due else None)
        now = time.monotonic()
        for fd in ready:
            for _ in range(64):
                try:
                    frame = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if random.random() >= loss:
                    pending[other[fd]].append((now + delay, frame))


if __name__ == "__main__":
    main()
