"""Peer processes for the multi-process tests: `python peers.py ROLE URL [ARGS...]`.
Each role connects to URL and plays one part; tests/test_ipc.py spawns them through a fixture."""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time

import lwmq

# Message sizes by sequence number: mostly small, some medium, one 64 KiB in every 64 (1 B to 64 KiB).
SIZES = [1 + (i * 37) % 256 for i in range(56)] + [1024, 2048, 4096, 8192, 12000, 16384, 3000] + [65536]
PAYLOADS = [bytes([i % 251]) * n for i, n in enumerate(SIZES)]


def source(ch: lwmq.Channel, count: int) -> None:
    """Sends `count` sequence-numbered messages of mixed sizes, in batches."""
    batch = []
    for seq in range(count):
        batch.append([seq.to_bytes(8, "little"), PAYLOADS[seq % 64]])
        if len(batch) == 256:
            ch.send_many(batch)
            batch = []
    if batch:
        ch.send_many(batch)
    ch.recv(timeout=600)  # the receiver says when it has everything


def source_priorities(ch: lwmq.Channel, count: int) -> None:
    """Three producer threads on three queues of different priorities, `count` messages in all."""
    queues = [ch.queue(priority=p, producers="many", capacity=10_000) for p in ("high", "normal", "low")]

    def produce(p: int) -> None:
        tag = bytes([p])
        for seq in range(p, count, 3):
            queues[p].post([tag + seq.to_bytes(8, "little"), PAYLOADS[seq % 64]])

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ch.recv(timeout=600)


def main() -> None:
    role, url, *args = sys.argv[1:]
    options = dict(arg.split("=", 1) for arg in args if "=" in arg)
    opts = {k: int(v) for k, v in options.items()}
    if role == "scribble":
        link = lwmq.raw_connect(url, timeout=10)
        view = memoryview(link._segment())
        print("ready", flush=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            view[:] = os.urandom(len(view))
            time.sleep(0.001)
        return
    if role == "forge":
        link = lwmq.raw_connect(url, timeout=10)
        link._forge_descriptor(opts.get("value", (999_999 << 32) | 10))
        print("ready", flush=True)
        time.sleep(30)
        return
    ch = lwmq.connect(url, timeout=10, **opts)
    print("ready", flush=True)
    if role == "echo":
        for message in ch:
            ch.send(message)
    elif role == "hold":  # connected, never reads
        time.sleep(600)
    elif role == "source":
        source(ch, int(args[0]))
    elif role == "source-priorities":
        source_priorities(ch, int(args[0]))
    elif role == "big":
        data = os.urandom(int(args[0]))
        ch.send([hashlib.sha256(data).digest(), data])
        ch.recv(timeout=60)
    elif role == "many":
        n = int(args[0])
        chans = [lwmq.connect(url, timeout=10, **opts) for _ in range(n - 1)] + [ch]
        for i, c in enumerate(chans):
            c.send(i.to_bytes(4, "little"))
        answered = gone = 0
        for i, c in enumerate(chans):
            try:
                assert int.from_bytes(bytes(c.recv(timeout=30)[0]), "little") == i * 2
                answered += 1
            except lwmq.PeerGone:
                gone += 1
        print(f"answered {answered} gone {gone}", flush=True)
        for c in chans:
            c.recv(timeout=600)  # until the test closes its ends
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main()
