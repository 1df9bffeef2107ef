"""The contenders: lwmq and its peers, each as a pair of functions run in two separate processes.

Throughput: `send(spec)` sends `count` messages of `size` bytes; `recv(spec)` receives them, checks every
message's length and the count, and returns the rate measured from the first message to the last.
Latency: `ping(spec)` times `count` round trips of `size` bytes against `pong(spec)`, which echoes.
Every function imports its peer's module itself, so a peer that is not installed is reported, not hidden.
"""

from __future__ import annotations

import array
import os
import socket
import time
from functools import partial
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


def _time_round_trips(spec: dict, send: Callable[[], object], recv_len: Callable[[], int]) -> dict:
    """The one loop every contender's latency is timed with: send, receive the echo, check its length.
    Warm-up round trips are not kept."""
    size, warmup, clock = spec["size"], spec["warmup"], time.perf_counter_ns
    samples = []
    for i in range(spec["count"] + warmup):
        t = clock()
        send()
        n = recv_len()
        if i >= warmup:
            samples.append(clock() - t)
        _check(n, size)
    return _latency_result(samples)


def _check(got: int, size: int) -> None:
    if got != size:
        raise AssertionError(f"received a message of {got} bytes, expected {size}")


# ---------------------------------------------------------------- lwmq


HARNESS_OPTIONS = ("objects",)  # options of the harness itself, not of lwmq.listen/connect


def _lwmq_options(spec: dict) -> dict:
    size = spec["size"]
    # Buffers big enough for the largest message plus headers; 64 KiB at least so small ones club.
    buffer_size = max(1 << 16, 1 << (size + 64).bit_length())
    options = {k: v for k, v in spec.get("options", {}).items() if k not in HARNESS_OPTIONS}
    return {"buffer_size": buffer_size, **options}


def lwmq_recv(spec: dict) -> dict:
    import lwmq

    size, count = spec["size"], spec["count"]
    with lwmq.listen(spec["address"], **_lwmq_options(spec)) as listener:
        spec["ready"].set()
        with listener.accept(timeout=RECV_TIMEOUT) as ch:
            got = 0
            first = 0.0
            objects = spec.get("options", {}).get("objects", False)
            expected = array.array("Q", [size]) * 65536
            while got < count:
                if objects:  # one Message object per message, like every peer's per-message recv
                    batch = ch.recv_many(4096, timeout=RECV_TIMEOUT)
                    for m in batch:
                        _check(m.nbytes, size)  # one frame: its length, without making a Frame object
                else:  # one MessageBatch per call; its sizes column compared whole with the expected sizes (in C)
                    batch = ch.recv_batch(65536, timeout=RECV_TIMEOUT)
                    if batch.sizes != expected[: len(batch)]:
                        raise AssertionError(f"a message in the batch is not {size} bytes")
                if not len(batch):
                    raise TimeoutError(f"lwmq delivered {got} of {count} messages, then nothing for {RECV_TIMEOUT} s")
                if got == 0:
                    first = time.perf_counter()
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
    with _lwmq_connect(spec) as ch:
        recv = ch.recv
        return _time_round_trips(spec, partial(ch.send, payload), lambda: recv(timeout=RECV_TIMEOUT).nbytes)


def _idle_wait(ch, seconds: float) -> tuple[dict, bool]:
    """Blocks in recv on a channel where nothing comes; returns this whole process's CPU use meanwhile
    (engine threads included), after the spin phase, and whether a message ended the wait early."""
    import lwmq

    time.sleep(0.2)  # past spin_us, and past the start-up of both processes
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        ch.recv(timeout=seconds)
        early = True
    except lwmq.Timeout:
        early = False
    return {"cpu_fraction": (time.process_time() - cpu) / (time.perf_counter() - wall)}, early


def lwmq_idle_listen(spec: dict) -> dict:
    import lwmq

    with lwmq.listen(spec["address"]) as listener:
        spec["ready"].set()
        with listener.accept(timeout=RECV_TIMEOUT) as ch:
            result, got_done = _idle_wait(ch, spec["seconds"])
            if not got_done:
                ch.recv(timeout=RECV_TIMEOUT)  # the connector's "done"
            ch.send(b"bye")
            return result


def lwmq_idle_connect(spec: dict) -> dict:
    with _lwmq_connect(spec) as ch:
        result, _ = _idle_wait(ch, spec["seconds"])  # nothing comes before our "done"
        ch.send(b"done")
        ch.recv(timeout=RECV_TIMEOUT)
        return result


# ---------------------------------------------------------------- pyzmq


def _zmq_address(spec: dict) -> str:
    return spec["address"]


def zmq_pull(spec: dict) -> dict:
    import zmq

    size, count = spec["size"], spec["count"]
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.LINGER, 0)
    # Rarely (about 1 run in 10 here) PULL never receives the last messages; report it, do not stall.
    pull.setsockopt(zmq.RCVTIMEO, 10_000)
    pull.bind(_zmq_address(spec))
    spec["ready"].set()
    copy = size < 65536
    first = 0.0
    for i in range(count):
        try:
            m = pull.recv(copy=copy)
        except zmq.Again:
            raise RuntimeError(f"pyzmq delivered {i} of {count} messages, then nothing for 10 s") from None
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
    result = _time_round_trips(spec, partial(s.send, payload), lambda: len(s.recv()))
    s.close(linger=0)
    ctx.term()
    return result


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
    return _time_round_trips(spec, partial(conn.send_bytes, payload), lambda: len(conn.recv_bytes()))


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
    result = _time_round_trips(spec, partial(s.send, payload), partial(s.recv_into, buf))
    s.close()
    return result


# ---------------------------------------------------------------- iceoryx2 (Python bindings)
# Settings that make it lossless (its defaults overwrite the oldest sample when a subscriber lags), and
# a probe/ack handshake: a new publisher's send() silently drops samples until the subscriber is
# connected. See shared/notes/PEERS.md.

_IOX_PROBE = 1  # probe samples are 1 byte; measured ones are at least 16


def _iox():
    import ctypes

    import iceoryx2 as iox

    iox.set_log_level(iox.LogLevel.Error)
    return iox, ctypes, iox.NodeBuilder.new().create(iox.ServiceType.Ipc)


def _iox_bytes_service(iox, ctypes, node, name: str):
    return (
        node.service_builder(iox.ServiceName.new(name))
        .publish_subscribe(iox.Slice[ctypes.c_uint8])
        .max_publishers(1)
        .max_subscribers(1)
        .history_size(0)
        .subscriber_max_buffer_size(64)
        .enable_safe_overflow(False)
        .open_or_create()
    )


def _iox_publisher(iox, service, size: int):
    return (
        service.publisher_builder()
        .initial_max_slice_len(max(size, _IOX_PROBE))
        .backpressure_strategy(iox.BackpressureStrategy.RetryUntilDelivered)
        .create()
    )


def _iox_send(ctypes, pub, src, n: int) -> int:
    sample = pub.loan_slice_uninit(n)
    ctypes.memmove(sample.payload_ptr, src, n)
    return sample.assume_init().send()


def iox_recv(spec: dict) -> dict:
    iox, ctypes, node = _iox()
    size, count = spec["size"], spec["count"]
    data = _iox_bytes_service(iox, ctypes, node, spec["address"] + "/data")
    ack = _iox_bytes_service(iox, ctypes, node, spec["address"] + "/ack")
    sub = data.subscriber_builder().buffer_size(64).create()
    ack_pub = _iox_publisher(iox, ack, 16)
    spec["ready"].set()
    token = (ctypes.c_uint8 * 16)()
    answered = False
    got = 0
    first = 0.0
    deadline = time.monotonic() + RECV_TIMEOUT
    receive = sub.receive
    while got < count:
        sample = receive()
        if sample is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"iceoryx2: {got} of {count} received")
            continue
        n = sample.header.number_of_elements
        del sample
        if n == _IOX_PROBE:
            if not answered:
                _iox_send(ctypes, ack_pub, token, 16)
                answered = True
            continue
        if got == 0:
            first = time.perf_counter()
        _check(n, size)
        got += 1
    last = time.perf_counter()
    _iox_send(ctypes, ack_pub, token, 16)  # done
    time.sleep(0.05)
    return _throughput_result(count, size, first, last)


def iox_send(spec: dict) -> None:
    iox, ctypes, node = _iox()
    size = spec["size"]
    data = _iox_bytes_service(iox, ctypes, node, spec["address"] + "/data")
    ack = _iox_bytes_service(iox, ctypes, node, spec["address"] + "/ack")
    pub = _iox_publisher(iox, data, size)
    ack_sub = ack.subscriber_builder().buffer_size(64).create()
    spec["ready"].wait(RECV_TIMEOUT)
    probe = (ctypes.c_uint8 * 1)()
    while ack_sub.receive() is None:  # until the subscriber is connected and says so
        _iox_send(ctypes, pub, probe, _IOX_PROBE)
        time.sleep(0.001)
    payload = (ctypes.c_uint8 * size).from_buffer_copy(os.urandom(size))
    for _ in range(spec["count"]):
        if _iox_send(ctypes, pub, payload, size) == 0:
            raise RuntimeError("iceoryx2 dropped a sample (no subscriber)")
    deadline = time.monotonic() + RECV_TIMEOUT
    while ack_sub.receive() is None and time.monotonic() < deadline:
        time.sleep(0.001)


class _IoxEndpoint:
    """One side of a ping-pong: publishes on `tx`, subscribes on `rx`; wakes by event or busy-polls."""

    def __init__(self, spec: dict, tx: str, rx: str, busy: bool):
        iox, ctypes, node = _iox()
        self.ctypes, self.busy = ctypes, busy
        base = spec["address"]
        self.pub = _iox_publisher(iox, _iox_bytes_service(iox, ctypes, node, f"{base}/{tx}"), spec["size"])
        self.sub = _iox_bytes_service(iox, ctypes, node, f"{base}/{rx}").subscriber_builder().buffer_size(64).create()
        if not busy:
            self.notifier = node.service_builder(iox.ServiceName.new(f"{base}/{tx}")).event().open_or_create().notifier_builder().create()
            self.listener = node.service_builder(iox.ServiceName.new(f"{base}/{rx}")).event().open_or_create().listener_builder().create()
        self.buf = (ctypes.c_uint8 * spec["size"])()

    def send(self, n: int) -> None:
        _iox_send(self.ctypes, self.pub, self.buf, n)
        if not self.busy:
            self.notifier.notify()

    def recv(self, timeout: float = RECV_TIMEOUT) -> int:
        deadline = time.monotonic() + timeout
        while True:
            sample = self.sub.receive()
            if sample is not None:
                n = sample.header.number_of_elements
                del sample
                return n
            if time.monotonic() > deadline:
                raise TimeoutError("iceoryx2: no reply")
            if not self.busy:
                self.listener.timed_wait(__import__("iceoryx2").Duration.from_secs_f64(0.1))


def _iox_latency_pong(spec: dict, busy: bool) -> None:
    end = _IoxEndpoint(spec, "pong", "ping", busy)
    spec["ready"].set()
    handled = 0
    while handled < spec["count"] + spec["warmup"]:
        n = end.recv()
        end.send(n)
        if n != _IOX_PROBE:
            handled += 1


def _iox_latency_ping(spec: dict, busy: bool) -> dict:
    end = _IoxEndpoint(spec, "ping", "pong", busy)
    spec["ready"].wait(RECV_TIMEOUT)
    while True:  # probe until the pong side is connected both ways
        end.send(_IOX_PROBE)
        try:
            if end.recv(timeout=0.01) == _IOX_PROBE:
                break
        except TimeoutError:
            continue
    while True:  # drain late probe echoes
        try:
            end.recv(timeout=0.05)
        except TimeoutError:
            break
    return _time_round_trips(spec, partial(end.send, spec["size"]), end.recv)


def iox_pong(spec: dict) -> None:
    _iox_latency_pong(spec, busy=False)


def iox_ping(spec: dict) -> dict:
    return _iox_latency_ping(spec, busy=False)


def iox_pong_busy(spec: dict) -> None:
    _iox_latency_pong(spec, busy=True)


def iox_ping_busy(spec: dict) -> dict:
    return _iox_latency_ping(spec, busy=True)


LOAN_SIZES = (4096, 65536, 1 << 20)
LOAN_CONTENDER = "lwmq ipc loan/ship"

CONTENDERS = [
    Contender("lwmq ipc send", "throughput", lwmq_send, lwmq_recv, module="lwmq"),
    Contender("lwmq ipc send_many", "throughput", lwmq_send_many, lwmq_recv, module="lwmq"),
    # The same pool of 32 buffers at every size, so only the size changes: the default pool is sized to a
    # byte budget (4 buffers of 2 MiB for 1 MiB messages), and a receiver that keeps at most a quarter of
    # a pool then takes one message per call, which is the pool's limit, not the loan's.
    Contender(LOAN_CONTENDER, "throughput", lwmq_loan, lwmq_recv, sizes=LOAN_SIZES, module="lwmq",
              options={"send_buffers": 32}),
    Contender("lwmq ipc send / recv_many (objects)", "throughput", lwmq_send, lwmq_recv, module="lwmq",
              sizes=(16, 256, 4096), options={"objects": True}),
    Contender("pyzmq PUSH/PULL ipc", "throughput", zmq_push, zmq_pull, module="zmq"),
    Contender("pyzmq PUSH/PULL tcp", "throughput", zmq_push, zmq_pull, module="zmq"),
    Contender("iceoryx2 pub/sub", "throughput", iox_send, iox_recv, module="iceoryx2"),
    Contender("multiprocessing.Pipe", "throughput", pipe_send, pipe_recv),
    Contender("AF_UNIX SOCK_SEQPACKET", "throughput", seqpacket_send, seqpacket_recv),
    Contender("lwmq ipc", "latency", lwmq_ping, lwmq_pong, module="lwmq"),
    Contender("lwmq ipc busy_poll", "latency", lwmq_ping, lwmq_pong, module="lwmq", options={"busy_poll": True}),
    Contender("pyzmq PAIR ipc", "latency", zmq_ping, zmq_pong, module="zmq"),
    Contender("iceoryx2 event wake-up", "latency", iox_ping, iox_pong, module="iceoryx2"),
    Contender("iceoryx2 busy-poll", "latency", iox_ping_busy, iox_pong_busy, module="iceoryx2"),
    Contender("multiprocessing.Pipe", "latency", pipe_ping, pipe_pong),
    Contender("AF_UNIX SOCK_SEQPACKET", "latency", seqpacket_ping, seqpacket_pong),
]
