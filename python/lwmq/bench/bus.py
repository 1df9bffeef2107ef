"""Publish/subscribe contenders: lwmq's bus:// and pyzmq PUB/SUB, with P publisher and S subscriber
processes (Python in each). Every subscriber checks the length of every message and the count; the
figure is the aggregate of messages delivered per second, from the first delivery to the last, across
all subscribers. Both contenders are lossless here: lwmq in backpressure mode, pyzmq with unlimited
high-water marks, after a probe handshake that waits out PUB/SUB's "slow joiner" start.

Latency is a ping-pong over two buses (two PUB/SUB pairs for pyzmq): publish → deliver → publish back
→ deliver, timed by the same loop as every other contender (peers._time_round_trips); one way is half.
"""

from __future__ import annotations

import array
import os
import time
from dataclasses import dataclass, field
from collections.abc import Callable

from .peers import RECV_TIMEOUT, _check, _time_round_trips

SIZE = 64


@dataclass
class PubSub:
    name: str
    publish: Callable  # one per publisher process
    subscribe: Callable  # one per subscriber process; returns its delivered count and times
    layout: tuple[int, int]  # (publishers, subscribers)
    module: str = "lwmq"
    options: dict = field(default_factory=dict)
    kind: str = "pubsub"
    sizes: tuple[int, ...] = (SIZE,)


def _bus_options() -> dict:
    extra = {"spin_us": float(os.environ["LWMQ_BENCH_SPIN_US"])} if "LWMQ_BENCH_SPIN_US" in os.environ else {}
    return {"capacity": 65536, "max_message_size": 128, "backpressure": True, **extra}


def _ready(spec: dict) -> None:
    with spec["ready"].get_lock():
        spec["ready"].value += 1


def _wait_go(spec: dict) -> None:
    if not spec["go"].wait(RECV_TIMEOUT):
        raise TimeoutError("the harness never said go")


def _result(got: int, first: float, last: float, lost: int = 0) -> dict:
    return {"delivered": got, "first": first, "last": last, "lost": lost}


# ---------------------------------------------------------------- lwmq bus


def lwmq_bus_publish(spec: dict) -> None:
    import lwmq

    payload, count = os.urandom(spec["size"]), spec["count"]
    with lwmq.Publisher(spec["address"], **_bus_options()) as pub:
        _ready(spec)
        _wait_go(spec)
        if spec["options"].get("many"):
            items = [(b"t", payload)] * 1024
            for start in range(0, count, 1024):
                n = min(1024, count - start)
                pub.publish_many(items if n == 1024 else items[:n], timeout=RECV_TIMEOUT)
        else:
            publish = pub.publish
            for _ in range(count):
                publish(b"t", payload, timeout=RECV_TIMEOUT)


def lwmq_bus_subscribe(spec: dict) -> dict:
    import lwmq

    size, expect = spec["size"], spec["count"] * spec["publishers"]
    with lwmq.Subscriber(spec["address"], start=0, **_bus_options()) as sub:
        _ready(spec)
        got, first = 0, 0.0
        if spec["options"].get("objects"):  # one Delivery object per message
            while got < expect:
                batch = sub.recv_many(4096, timeout=RECV_TIMEOUT)
                if not batch:
                    raise TimeoutError(f"bus delivered {got} of {expect}")
                if got == 0:
                    first = time.perf_counter()
                for d in batch:
                    _check(d.nbytes, size)
                got += len(batch)
        else:  # one Batch per call; its sizes column compared whole with the expected sizes (in C)
            expected = array.array("Q", [size]) * 65536
            while got < expect:
                batch = sub.recv_batch(65536, timeout=RECV_TIMEOUT)
                if not len(batch):
                    raise TimeoutError(f"bus delivered {got} of {expect}")
                if got == 0:
                    first = time.perf_counter()
                if batch.sizes != expected[: len(batch)]:
                    raise AssertionError(f"a message in the batch is not {size} bytes")
                got += len(batch)
        return _result(got, first, time.perf_counter(), sub.lost)


# ---------------------------------------------------------------- pyzmq PUB/SUB


def _zmq_address(spec: dict, i: int) -> str:
    return f"ipc://@{spec['address']}-{i}"


def zmq_publish(spec: dict) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUB)
    sock.setsockopt(zmq.SNDHWM, 0)  # unlimited: nothing dropped
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(_zmq_address(spec, spec["index"]))
    probe = b"P%d" % spec["index"]
    _ready(spec)
    while not spec["go"].is_set():  # PUB drops until a SUB is connected: probe until everyone is
        sock.send(probe)
        time.sleep(0.002)
    payload, send = os.urandom(spec["size"]), sock.send
    for _ in range(spec["count"]):
        send(payload)
    spec["finished"].wait(RECV_TIMEOUT)
    sock.close()
    ctx.term()


def zmq_subscribe(spec: dict) -> dict:
    import zmq

    size, expect, publishers = spec["size"], spec["count"] * spec["publishers"], spec["publishers"]
    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(RECV_TIMEOUT * 1000))
    for i in range(publishers):
        sock.connect(_zmq_address(spec, i))
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    seen: set[bytes] = set()
    while len(seen) < publishers:  # a probe from every publisher: all connections are up
        m = sock.recv()
        if len(m) != size:
            seen.add(m)
    _ready(spec)
    got, first, recv = 0, 0.0, sock.recv
    while got < expect:
        m = recv()
        if len(m) != size:
            if m[:1] == b"P":
                continue  # a late probe
            _check(len(m), size)
        if got == 0:
            first = time.perf_counter()
        got += 1
    last = time.perf_counter()
    sock.close()
    ctx.term()
    return _result(got, first, last)


# ---------------------------------------------------------------- latency


def lwmq_bus_ping(spec: dict) -> dict:
    import lwmq

    there, back = spec["address"] + "-x", spec["address"] + "-y"
    with lwmq.Publisher(there) as pub, lwmq.Subscriber(back) as sub:
        spec["ready"].wait(RECV_TIMEOUT)  # the pong side has joined both buses
        payload = os.urandom(spec["size"])
        return _time_round_trips(
            spec, lambda: pub.publish(b"t", payload), lambda: sub.recv(timeout=RECV_TIMEOUT).nbytes
        )


def lwmq_bus_pong(spec: dict) -> None:
    import lwmq

    there, back = spec["address"] + "-x", spec["address"] + "-y"
    with lwmq.Subscriber(there) as sub, lwmq.Publisher(back) as pub:
        spec["ready"].set()
        for _ in range(spec["count"] + spec["warmup"]):
            d = sub.recv(timeout=RECV_TIMEOUT)
            pub.publish(b"t", d.message)


def zmq_pubsub_ping(spec: dict) -> dict:
    import zmq

    ctx = zmq.Context()
    pub, sub = ctx.socket(zmq.PUB), ctx.socket(zmq.SUB)
    pub.bind(f"ipc://@{spec['address']}-x")
    sub.connect(f"ipc://@{spec['address']}-y")
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    spec["ready"].wait(RECV_TIMEOUT)
    while True:  # hello until the pong's answer comes back: both directions are connected
        pub.send(b"hello")
        if sub.poll(10):
            if sub.recv() == b"back":
                break
    while sub.poll(50):  # answers to extra hellos
        sub.recv()
    payload = os.urandom(spec["size"])
    try:
        return _time_round_trips(spec, lambda: pub.send(payload), lambda: len(sub.recv()))
    finally:
        pub.close(0)
        sub.close(0)
        ctx.term()


def zmq_pubsub_pong(spec: dict) -> None:
    import zmq

    ctx = zmq.Context()
    sub, pub = ctx.socket(zmq.SUB), ctx.socket(zmq.PUB)
    pub.bind(f"ipc://@{spec['address']}-y")
    sub.connect(f"ipc://@{spec['address']}-x")
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    spec["ready"].set()
    echoed = 0
    while echoed < spec["count"] + spec["warmup"]:
        m = sub.recv()
        if m == b"hello":
            pub.send(b"back")
            continue
        pub.send(m)
        echoed += 1
    pub.close(0)
    sub.close(0)
    ctx.term()


PUBSUB = [
    PubSub("lwmq bus publish / recv_batch", lwmq_bus_publish, lwmq_bus_subscribe, (1, 1)),
    PubSub("lwmq bus publish_many / recv_batch", lwmq_bus_publish, lwmq_bus_subscribe, (1, 1), options={"many": True}),
    PubSub("lwmq bus publish / recv_many (objects)", lwmq_bus_publish, lwmq_bus_subscribe, (1, 1), options={"objects": True}),
    PubSub("pyzmq PUB/SUB ipc", zmq_publish, zmq_subscribe, (1, 1), module="zmq"),
    PubSub("lwmq bus 4x4 publish / recv_batch", lwmq_bus_publish, lwmq_bus_subscribe, (4, 4)),
    PubSub("lwmq bus 4x4 publish_many / recv_batch", lwmq_bus_publish, lwmq_bus_subscribe, (4, 4), options={"many": True}),
    PubSub("pyzmq PUB/SUB ipc 4x4", zmq_publish, zmq_subscribe, (4, 4), module="zmq"),
]
