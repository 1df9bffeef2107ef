"""Bus members for the multi-process tests: `python bus_peers.py ROLE BUS OPTIONS_JSON [ARGS...]`.
Each prints "ready" once it has joined; tests/test_bus.py spawns them through a fixture that kills them
at teardown. Every payload carries its publisher, its counter and a CRC, so a torn message is caught."""

from __future__ import annotations

import hashlib
import json
import struct
import sys
import threading
import time
import zlib

import lwmq

HEAD = struct.Struct("<IQ")  # publisher index, counter


def payload(index: int, counter: int, size: int = 64) -> bytes:
    body = HEAD.pack(index, counter)
    body += bytes([(index * 31 + counter) % 251]) * (size - HEAD.size - 4)
    return body + struct.pack("<I", zlib.crc32(body))


def check(data: bytes) -> tuple[int, int]:
    """(publisher index, counter) of a whole payload; raises if it is torn."""
    body, crc = data[:-4], struct.unpack("<I", data[-4:])[0]
    if zlib.crc32(body) != crc:
        raise AssertionError(f"torn message: crc mismatch ({len(data)} bytes)")
    return HEAD.unpack_from(body)


def ready() -> None:
    print("ready", flush=True)


def publish(bus: str, options: dict, index: int, count: int) -> None:
    """Joins, says ready, waits for "go" on stdin, publishes `count` messages, says done."""
    with lwmq.Publisher(bus, **options) as pub:
        ready()
        sys.stdin.readline()
        topic = f"p{index}".encode()
        for counter in range(count):
            pub.publish(topic, payload(index, counter), timeout=60)
        print("done", flush=True)
        sys.stdin.readline()  # stay a member until the test says so


def publish_forever(bus: str, options: dict, index: int) -> None:
    """Publishes until killed, or until a line on stdin: then it stops and prints the longest time one
    publish took (how long it was ever held up). Ready after the first message."""
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    with lwmq.Publisher(bus, **options) as pub:
        topic = f"p{index}".encode()
        counter, longest = 0, 0.0
        pub.publish(topic, payload(index, counter), timeout=60)
        ready()
        while not stop.is_set():
            counter += 1
            t = time.monotonic()
            pub.publish(topic, payload(index, counter), timeout=60)
            longest = max(longest, time.monotonic() - t)
    print(json.dumps({"published": counter + 1, "longest_publish_s": longest}), flush=True)


def publish_topics(bus: str, options: dict, topics: str) -> None:
    """Publishes one message per comma-separated topic, in order, after "go"."""
    with lwmq.Publisher(bus, **options) as pub:
        ready()
        sys.stdin.readline()
        for i, t in enumerate(topics.split(",")):
            pub.publish(t.encode(), payload(0, i))
        print("done", flush=True)
        sys.stdin.readline()


def subscribe(bus: str, options: dict, count: int) -> None:
    """Receives `count` deliveries, checks each is whole and each publisher's counters come in order, and
    prints a digest of the (publisher, counter) sequence with the loss figures."""
    with lwmq.Subscriber(bus, **options) as sub:
        ready()
        digest = hashlib.sha256()
        last: dict[int, int] = {}
        got, seqs_ok, prev_seq = 0, True, None
        while got < count:
            for d in sub.recv_many(4096, timeout=60):
                index, counter = check(d.message[0].tobytes())
                if counter <= last.get(index, -1):
                    raise AssertionError(f"publisher {index}: counter {counter} after {last[index]}")
                last[index] = counter
                digest.update(HEAD.pack(index, counter))
                if prev_seq is not None and d.seq != prev_seq + 1 + d.lost:
                    seqs_ok = False
                prev_seq = d.seq
                got += 1
        print(json.dumps({"got": got, "digest": digest.hexdigest(), "lost": sub.lost, "last": last,
                          "seqs_consecutive": seqs_ok}), flush=True)


def subscribe_idle(bus: str, options: dict) -> None:
    """Joins and never reads (a subscriber that stalls)."""
    with lwmq.Subscriber(bus, **options):
        ready()
        time.sleep(3600)


ROLES = {"publish": publish, "publish_forever": publish_forever, "publish_topics": publish_topics,
         "subscribe": subscribe, "subscribe_idle": subscribe_idle}

if __name__ == "__main__":
    role, bus, options, *args = sys.argv[1:]
    ROLES[role](bus, json.loads(options), *(int(a) if a.isdigit() else a for a in args))
