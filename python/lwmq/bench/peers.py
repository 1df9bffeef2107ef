"""The contenders: lwmq and its peers, each as a pair of functions run in two separate processes.

Throughput: `send(spec)` sends `count` messages of `size` bytes; `recv(spec)` receives them, checks every
message's length and the count, and returns the rate measured from the first message to the last.
Latency: `ping(spec)` times `count` round trips of `size` bytes against `pong(spec)`, which echoes.
Every function imports its peer's module itself, so a peer that is not installed is reported, not hidden.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

RECV_TIMEOUT = 30.0


@dataclass
class Contender:
    name: str
    kind: str  # "throughput" | "latency"
    a: Callable  # throughput: sender; latency: ping (measures)
    b: Callable  # throughput: receiver (measures); latency: pong
    sizes: tuple[int, ...] | None = None  # None: every size of the run
    module: str | None = None  # the import that must work for this contender
    options: dict = field(default_factory=dict)


def _throughput_result(count: int, size: int, first: float, last: float) -> dict:
    elapsed = max(last - first, 1e-9)
    # Rates over the count-1 intervals between the first and the last message.
    rate = (count - 1) / elapsed
    return {"messages_per_s": rate, "gb_per_s": rate * size / 1e9, "seconds": elapsed, "checked": count}


def _latency_result(samples_ns: list[int]) -> dict:
    samples_ns.sort()
    n = len(samples_ns)

    def pct(q: float) -> float:
        return samples_ns[min(n - 1, int(q * n))] / 1000.0

    return {"p50_us": pct(0.50), "p99_us": pct(0.99), "p999_us": pct(0.999), "round_trips": n}


def _check(got: int, size: int) -> None:
    if got != size:
        raise AssertionError(f"received a message of {got} bytes, expected {size}")


# ---------------------------------------------------------------- lwmq


def _lwmq_options(spec: dict) -> dict:
    size = spec["size"]
    # Buffers big enough for the largest message plus headers; 64 KiB at least so small ones club.
    buffer_size = max(1 << 16, 1 << (size + 64).bit_length())
    return {"buffer_size": buffer_size, **spec.get("options", {})}


def lwmq_recv(spec: dict) -> dict:
    import lwmq

    size, count = spec["size"], spec["count"]
    with lwmq.listen(spec["address"], **_lwmq_options(spec)) as listener:
        spec["ready"].set()
        with listener.accept(timeout=RECV_TIMEOUT) as ch:
            got = 0
            first = 0.0
            while got < count:
                batch = ch.recv_many(4096, timeout=RECV_TIMEOUT)
                if got == 0:
                    first = time.perf_counter()
                for m in batch:
                    _check(len(m[0]), size)
                got += len(batch)
            last = time.perf_counter()
            ch.send(b"done")
    return _throughput_result(count, size, first, last)


def _lwmq_connect(spec: dict):
    import lwmq

    spec["ready"].wait(RECV_TIMEOUT)
    return lwmq.connect(spec["address"], timeout=RECV_TIMEOUT, **_lwmq_options(spec))


def lwmq_send(spec: dict) -> None:
    payload = os.urandom(spec["size"])
    with _lwmq_connect(spec) as ch:
        send = ch.send
        for _ in range(spec["count"]):
            send(payload)
        ch.recv(timeout=RECV_TIMEOUT)


def lwmq_send_many(spec: dict) -> None:
    payload = os.urandom(spec["size"])
    count = spec["count"]
    with _lwmq_connect(spec) as ch:
        batch = max(1, min(1024, (ch.buffer_size // (spec["size"] + 32)) * 4))
        full = [payload] * batch
        sent = 0
        while sent < count:
            n = min(batch, count - sent)
            ch.send_many(full if n == batch else full[:n])
            sent += n
        ch.recv(timeout=RECV_TIMEOUT)


def lwmq_loan(spec: dict) -> None:
    """The producer writes its data in place: here an 8-byte sequence number at the head of each
    message (the rest stands for data the producer generated in place); nothing is copied."""
    size = spec["size"]
    with _lwmq_connect(spec) as ch:
        loan = ch.loan
        for seq in range(spec["count"]):
            buf = loan(size)
            buf[:8] = seq.to_bytes(8, "little")
            buf.ship(size)
        ch.recv(timeout=RECV_TIMEOUT)


def lwmq_pong(spec: dict) -> None:
    import lwmq

    with lwmq.listen(spec["address"], **_lwmq_options(spec)) as listener:
        spec["ready"].set()
        with listener.accept(timeout=RECV_TIMEOUT) as ch:
            recv, send = ch.recv, ch.send
            for _ in range(spec["count"] + spec["warmup"]):
                send(recv(timeout=RECV_TIMEOUT))


def lwmq_ping(spec: dict) -> dict:
    payload = os.urandom(spec["size"])
    samples = []
    with _lwmq_connect(spec) as ch:
        recv, send, clock = ch.recv, ch.send, time.perf_counter_ns
        for i in range(spec["count"] + spec["warmup"]):
            t = clock()
            send(payload)
            m = recv(timeout=RECV_TIMEOUT)
            if i >= spec["warmup"]:
                samples.append(clock() - t)
            _check(len(m[0]), spec["size"])
    return _latency_result(samples)


# ---------------------------------------------------------------- pyzmq


def _zmq_address(spec: dict) -> str:
    return spec["address"]


def zmq_pull(spec: dict) -> dict:
    import zmq

    size, count = spec["size"], spec["count"]
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.LINGER, 0)
    pull.bind(_zmq_address(spec))
    spec["ready"].set()
    copy = size < 65536
    first = 0.0
    for i in range(count):
        m = pull.recv(copy=copy)
        if i == 0:
            first = time.perf_counter()
        _check(len(m) if copy else len(m.buffer), size)
    last = time.perf_counter()
    pull.close()
    ctx.term()
    return _throughput_result(count, size, first, last)


def zmq_push(spec: dict) -> None:
    import zmq

    payload = os.urandom(spec["size"])
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    spec["ready"].wait(RECV_TIMEOUT)
    push.connect(_zmq_address(spec))
    copy = spec["size"] < 65536
    send = push.send
    for _ in range(spec["count"]):
        send(payload, copy=copy)
    push.close(linger=-1)  # deliver everything before exiting
    ctx.term()


def zmq_pong(spec: dict) -> None:
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.PAIR)
    s.bind(_zmq_address(spec))
    spec["ready"].set()
    for _ in range(spec["count"] + spec["warmup"]):
        s.send(s.recv())
    s.close(linger=1000)
    ctx.term()


def zmq_ping(spec: dict) -> dict:
    import zmq

    payload = os.urandom(spec["size"])
    ctx = zmq.Context()
    s = ctx.socket(zmq.PAIR)
    spec["ready"].wait(RECV_TIMEOUT)
    s.connect(_zmq_address(spec))
    samples = []
    clock = time.perf_counter_ns
    for i in range(spec["count"] + spec["warmup"]):
        t = clock()
        s.send(payload)
        m = s.recv()
        if i >= spec["warmup"]:
            samples.append(clock() - t)
        _check(len(m), spec["size"])
    s.close(linger=0)
    ctx.term()
    return _latency_result(samples)


# ---------------------------------------------------------------- multiprocessing.Pipe


def pipe_recv(spec: dict) -> dict:
    conn = spec["pipe"][0]
    size, count = spec["size"], spec["count"]
    spec["ready"].set()
    buf = bytearray(size)
    first = 0.0
    for i in range(count):
        n = conn.recv_bytes_into(buf)
        if i == 0:
            first = time.perf_counter()
        _check(n, size)
    last = time.perf_counter()
    return _throughput_result(count, size, first, last)


def pipe_send(spec: dict) -> None:
    conn = spec["pipe"][1]
    payload = os.urandom(spec["size"])
    spec["ready"].wait(RECV_TIMEOUT)
    send = conn.send_bytes
    for _ in range(spec["count"]):
        send(payload)


def pipe_pong(spec: dict) -> None:
    conn = spec["pipe"][0]
    spec["ready"].set()
    for _ in range(spec["count"] + spec["warmup"]):
        conn.send_bytes(conn.recv_bytes())


def pipe_ping(spec: dict) -> dict:
    conn = spec["pipe"][1]
    payload = os.urandom(spec["size"])
    spec["ready"].wait(RECV_TIMEOUT)
    samples = []
    clock = time.perf_counter_ns
    for i in range(spec["count"] + spec["warmup"]):
        t = clock()
        conn.send_bytes(payload)
        m = conn.recv_bytes()
        if i >= spec["warmup"]:
            samples.append(clock() - t)
        _check(len(m), spec["size"])
    return _latency_result(samples)


# ---------------------------------------------------------------- raw AF_UNIX SOCK_SEQPACKET


def _seqpacket(spec: dict, listen: bool) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    # A 1 MiB packet needs socket buffers larger than the default; as root SO_*BUFFORCE lifts the cap.
    want = max(4 * spec["size"], 1 << 20)
    for opt in ("SO_SNDBUFFORCE", "SO_RCVBUFFORCE"):
        try:
            s.setsockopt(socket.SOL_SOCKET, getattr(socket, opt, 32 if opt == "SO_SNDBUFFORCE" else 33), want)
        except OSError:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF if "SND" in opt else socket.SO_RCVBUF, want)
    name = b"\0" + spec["address"].encode()
    if listen:
        s.bind(name)
        s.listen(1)
        spec["ready"].set()
        conn, _ = s.accept()
        s.close()
        return conn
    spec["ready"].wait(RECV_TIMEOUT)
    s.connect(name)
    return s


def seqpacket_recv(spec: dict) -> dict:
    size, count = spec["size"], spec["count"]
    s = _seqpacket(spec, listen=True)
    buf = bytearray(size + 1)
    first = 0.0
    for i in range(count):
        n = s.recv_into(buf)
        if i == 0:
            first = time.perf_counter()
        _check(n, size)
    last = time.perf_counter()
    s.close()
    return _throughput_result(count, size, first, last)


def seqpacket_send(spec: dict) -> None:
    s = _seqpacket(spec, listen=False)
    payload = os.urandom(spec["size"])
    send = s.send
    for _ in range(spec["count"]):
        send(payload)
    s.close()


def seqpacket_pong(spec: dict) -> None:
    s = _seqpacket(spec, listen=True)
    buf = bytearray(spec["size"] + 1)
    for _ in range(spec["count"] + spec["warmup"]):
        n = s.recv_into(buf)
        s.send(memoryview(buf)[:n])
    s.close()


def seqpacket_ping(spec: dict) -> dict:
    s = _seqpacket(spec, listen=False)
    payload = os.urandom(spec["size"])
    buf = bytearray(spec["size"] + 1)
    samples = []
    clock = time.perf_counter_ns
    for i in range(spec["count"] + spec["warmup"]):
        t = clock()
        s.send(payload)
        n = s.recv_into(buf)
        if i >= spec["warmup"]:
            samples.append(clock() - t)
        _check(n, spec["size"])
    s.close()
    return _latency_result(samples)


LOAN_SIZES = (4096, 65536, 1 << 20)

CONTENDERS = [
    Contender("lwmq ipc send", "throughput", lwmq_send, lwmq_recv, module="lwmq"),
    Contender("lwmq ipc send_many", "throughput", lwmq_send_many, lwmq_recv, module="lwmq"),
    Contender("lwmq ipc loan/ship", "throughput", lwmq_loan, lwmq_recv, sizes=LOAN_SIZES, module="lwmq"),
    Contender("pyzmq PUSH/PULL ipc", "throughput", zmq_push, zmq_pull, module="zmq"),
    Contender("pyzmq PUSH/PULL tcp", "throughput", zmq_push, zmq_pull, module="zmq"),
    Contender("multiprocessing.Pipe", "throughput", pipe_send, pipe_recv),
    Contender("AF_UNIX SOCK_SEQPACKET", "throughput", seqpacket_send, seqpacket_recv),
    Contender("lwmq ipc", "latency", lwmq_ping, lwmq_pong, module="lwmq"),
    Contender("lwmq ipc busy_poll", "latency", lwmq_ping, lwmq_pong, module="lwmq", options={"busy_poll": True}),
    Contender("pyzmq PAIR ipc", "latency", zmq_ping, zmq_pong, module="zmq"),
    Contender("multiprocessing.Pipe", "latency", pipe_ping, pipe_pong),
    Contender("AF_UNIX SOCK_SEQPACKET", "latency", seqpacket_ping, seqpacket_pong),
]
