"""bus://: many publishers and subscribers in separate processes, total order, loss detection,
backpressure, crash safety (SIGKILL), topics, replay, cleanup. Members are spawned through the `members`
fixture, which kills every one at teardown."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import lwmq
from conftest import engine_threads, wait_for

sys.path.insert(0, os.path.dirname(__file__))
from bus_peers import check, payload  # noqa: E402

PEERS = os.path.join(os.path.dirname(__file__), "bus_peers.py")
_count = iter(range(1_000_000))


@pytest.fixture
def bus() -> str:
    """A fresh bus name for this test."""
    return f"bus://t-{os.getpid()}-{next(_count)}"


@pytest.fixture
def members():
    """members(role, bus, options, *args) -> Popen, started and joined ("ready"); killed at teardown."""
    procs: list[subprocess.Popen] = []

    def start(role: str, bus: str, options: dict | None = None, *args) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, PEERS, role, bus, json.dumps(options or {}), *map(str, args)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(p)
        line = p.stdout.readline()
        assert line == "ready\n", f"bus member {role} did not start: {line!r}"
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)
        for f in (p.stdin, p.stdout):
            f.close()


def tell(p: subprocess.Popen, line: str = "go") -> None:
    p.stdin.write(line + "\n")
    p.stdin.flush()


def bus_sockets(name: str) -> list[str]:
    """Abstract sockets of this bus still listed by the kernel."""
    with open("/proc/net/unix") as f:
        return [line for line in f if f"@lwmq-bus/{name}/" in line]


def shm_files() -> set[str]:
    return set(os.listdir("/dev/shm"))


def test_four_publishers_four_subscribers_one_million_messages_in_one_order(bus, members):
    per_publisher, n_pub, n_sub = 250_000, 4, 4
    total = per_publisher * n_pub
    options = {"capacity": 65536, "max_message_size": 128, "backpressure": True}
    subs = [members("subscribe", bus, {**options, "start": 0}, total) for _ in range(n_sub)]
    pubs = [members("publish", bus, options, i, per_publisher) for i in range(n_pub)]
    for p in pubs:
        tell(p)
    results = [json.loads(s.stdout.readline()) for s in subs]
    for p in pubs:
        assert p.stdout.readline() == "done\n"
        tell(p, "exit")
    # Identical total order everywhere; nothing lost; every publisher's counters complete and in order
    # (checked message by message inside each subscriber).
    assert {r["digest"] for r in results} == {results[0]["digest"]}
    for r in results:
        assert r["got"] == total and r["lost"] == 0 and r["seqs_consecutive"]
        assert r["last"] == {str(i): per_publisher - 1 for i in range(n_pub)}


def test_a_paused_subscriber_loses_messages_and_reports_the_exact_count(bus, members):
    with lwmq.Subscriber(bus, capacity=1024, max_message_size=128) as sub:
        pub = members("publish", bus, {}, 0, 5000)
        tell(pub)  # we do not read: the ring laps us
        assert pub.stdout.readline() == "done\n"
        got = []
        while True:
            batch = sub.recv_many(4096, timeout=0.2)
            if not batch:
                break
            got += batch
        # Exactly the last 1024 are still in the ring; the first delivery carries the loss.
        assert [d.seq for d in got] == list(range(5000 - 1024, 5000))
        assert got[0].lost == 5000 - 1024 and all(d.lost == 0 for d in got[1:])
        assert sub.lost == 5000 - 1024 == 5000 - len(got)
        assert [check(d.message[0].tobytes())[1] for d in got] == list(range(5000 - 1024, 5000))


def test_backpressure_blocks_publishers_then_resumes_and_loses_nothing(bus, members):
    with lwmq.Subscriber(bus, capacity=1024, max_message_size=128, backpressure=True) as sub:
        pub = members("publish", bus, {}, 0, 5000)
        tell(pub)
        # The publisher fills the ring and then waits for us: the tail stops at one lap ahead of us.
        assert wait_for(lambda: sub.info()["tail"] == 1024)
        time.sleep(0.2)
        assert sub.info()["tail"] == 1024 and pub.poll() is None
        counters = []
        while len(counters) < 5000:
            counters += [check(d.message[0].tobytes())[1] for d in sub.recv_many(4096, timeout=10)]
        assert counters == list(range(5000)) and sub.lost == 0
        assert pub.stdout.readline() == "done\n"


def test_killing_a_publisher_100_times_never_blocks_the_others_nor_tears_a_message(bus, members):
    options = {"capacity": 4096, "max_message_size": 128}
    with lwmq.Subscriber(bus, start=0, **options) as sub, lwmq.Publisher(bus) as me:
        survivors = [members("publish_forever", bus, {}, i) for i in (1, 2)]
        delivered, resumed, last = [], [], {}
        stop = threading.Event()

        def take(batch):  # every delivery must be whole, and each publisher's counters in order
            for d in batch:
                index, counter = check(d.message[0].tobytes())
                assert counter > last.get(index, -1)
                last[index] = counter
                delivered.append(index)

        def drain():
            while not stop.is_set():
                take(sub.recv_many(4096, timeout=0.1))

        reader = threading.Thread(target=drain)
        reader.start()
        try:
            for kill in range(100):
                # The victim holds the append lock for 2 ms of every publish: a kill lands mid-append.
                victim = members("publish_forever", bus, {"debug_stall_us": 2000}, 100 + kill)
                time.sleep(random.uniform(0.001, 0.01))
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                t = time.monotonic()
                me.publish(b"me", payload(0, kill), timeout=1.0)
                resumed.append(time.monotonic() - t)
            for s in survivors:
                assert s.poll() is None  # they went on publishing throughout
                tell(s, "stop")
            held_up = [json.loads(s.stdout.readline())["longest_publish_s"] for s in survivors]
        finally:
            stop.set()
            reader.join()
        while batch := sub.recv_many(4096, timeout=0.2):
            take(batch)
        info = me.info()
    # The issue names this bound: the others go on within 100 ms of a kill (the kernel hands the lock over
    # at once; a publish after a kill takes well under a millisecond here).
    assert max(resumed) < 0.1, sorted(resumed)[-5:]
    # ... and so do the other publishers: none of their publishes, over all 100 kills, took 100 ms.
    assert max(held_up) < 0.1, held_up
    assert info["lock"] == "free"
    assert info["recoveries"] >= 50, info  # most kills landed inside an append and were repaired
    # Every sequence number is accounted for: delivered whole, or counted lost (the survivors outran us).
    assert len(delivered) + sub.lost == info["tail"]
    assert delivered.count(1) > 0 and delivered.count(2) > 0 and delivered.count(0) > 0


def test_a_killed_subscriber_no_longer_holds_back_publishers(bus, members):
    options = {"capacity": 64, "max_message_size": 128, "backpressure": True}
    idle = members("subscribe_idle", bus, options)
    with lwmq.Publisher(bus, **options) as pub:
        for i in range(64):
            pub.publish(b"t", payload(0, i), timeout=1)
        with pytest.raises(lwmq.Timeout):
            pub.publish(b"t", payload(0, 64), timeout=0.05)
        returned = []
        blocked = threading.Thread(target=lambda: returned.append((pub.publish(b"t", payload(0, 64), timeout=5), time.monotonic())))
        blocked.start()
        time.sleep(0.1)
        assert not returned  # held back by the idle subscriber
        idle.send_signal(signal.SIGKILL)
        idle.wait()
        killed = time.monotonic()
        blocked.join()
        # The blocked publisher finds the laggard dead (checked every 5 ms while blocked) and goes on
        # promptly: ~5-10 ms here; the bound asserted is generous for a loaded 2-core machine.
        (seq, at), = returned
        assert seq == 64 and at - killed < 0.5, at - killed
        assert pub.info()["subscribers"] == 0


def test_members_join_and_leave_while_traffic_flows(bus, members):
    with lwmq.Publisher(bus, capacity=8192, max_message_size=128):
        publishers = [members("publish_forever", bus, {}, i) for i in range(2)]
        for round_ in range(20):
            with lwmq.Subscriber(bus) as sub:
                got = []
                while len(got) < 500:
                    got += sub.recv_many(500 - len(got), timeout=5)
                for prev, d in zip(got, got[1:]):
                    assert d.seq == prev.seq + 1 + d.lost  # every gap is accounted for
                for d in got:
                    check(d.message[0].tobytes())
            if round_ % 5 == 4:  # a publisher leaves and a new one joins
                publishers[0].kill()
                publishers[0].wait()
                publishers = publishers[1:] + [members("publish_forever", bus, {}, 10 + round_)]


def test_topic_filters_deliver_exactly_the_matching_messages(bus, members):
    topics = ["AAPL", "AAPL.X", "MSFT", "md.a", "md.b", "mdx", "x.md", "AAPL"]
    subs = {
        "exact": lwmq.Subscriber(bus, topics=[b"AAPL", "MSFT"]),
        "prefix": lwmq.Subscriber(bus, prefixes=[b"md."]),
        "both": lwmq.Subscriber(bus, topics=[b"mdx"], prefixes=["AAPL"]),
        "all": lwmq.Subscriber(bus),
    }
    try:
        pub = members("publish_topics", bus, {}, ",".join(topics))
        tell(pub)
        assert pub.stdout.readline() == "done\n"
        expected = {
            "exact": ["AAPL", "MSFT", "AAPL"],
            "prefix": ["md.a", "md.b"],
            "both": ["AAPL", "AAPL.X", "mdx", "AAPL"],
            "all": topics,
        }
        for name, sub in subs.items():
            got = []
            while batch := sub.recv_many(100, timeout=0.2):
                got += batch
            assert [d.topic.decode() for d in got] == expected[name], name
    finally:
        for s in subs.values():
            s.close()


def test_replay_from_a_sequence_oldest_or_one_that_is_gone(bus):
    with lwmq.Publisher(bus, capacity=64, max_message_size=64) as pub:
        for i in range(100):
            pub.publish(b"t", i.to_bytes(8, "little"))
        with lwmq.Subscriber(bus, start=50) as sub:
            got = sub.recv_many(100, timeout=1)
            assert [d.seq for d in got] == list(range(50, 100)) and sub.lost == 0
        with lwmq.Subscriber(bus, start="oldest") as sub:
            assert [d.seq for d in sub.recv_many(100, timeout=1)] == list(range(36, 100))
        with lwmq.Subscriber(bus, start=10) as sub:  # gone: 10..35 were overwritten
            first = sub.recv(timeout=1)
            assert (first.seq, first.lost, sub.lost) == (36, 26, 26)
        with lwmq.Subscriber(bus, start=120) as sub:  # the future: waits for it
            for i in range(100, 125):
                pub.publish(b"t", i.to_bytes(8, "little"))
            assert sub.recv(timeout=1).seq == 120 and sub.position == 121


def test_nothing_is_left_behind_when_every_member_is_gone_crash_included(bus, members):
    name = bus.removeprefix("bus://")
    before_shm, before_threads = shm_files(), engine_threads()
    with lwmq.Publisher(bus, capacity=1024) as pub:
        idle = members("subscribe_idle", bus)
        forever = members("publish_forever", bus, {"debug_stall_us": 1000}, 1)
        pub.publish(b"t", b"x")
        assert len(bus_sockets(name)) >= 3  # one server per member process
    idle.kill()
    forever.kill()  # very likely mid-append
    idle.wait()
    forever.wait()
    assert wait_for(lambda: not bus_sockets(name))
    assert shm_files() == before_shm and engine_threads() == before_threads
    # The memfd went with its last member: the next joiner makes a new, empty bus.
    with lwmq.Publisher(bus, capacity=8) as fresh:
        assert fresh.info()["tail"] == 0 and fresh.info()["capacity"] == 8


def test_clear_errors(bus):
    with lwmq.Publisher(bus, capacity=16, max_message_size=64) as pub:
        with pytest.raises(lwmq.BusMismatch, match="capacity 16 .asked 32."):
            lwmq.Subscriber(bus, capacity=32)
        with pytest.raises(lwmq.BusMismatch, match="backpressure"):
            lwmq.Publisher(bus, backpressure=True)
        with pytest.raises(lwmq.BusMismatch, match="max_message_size 64 .asked 128."):
            lwmq.Subscriber(bus, max_message_size=128)
        with lwmq.Subscriber(bus, capacity=16, max_message_size=64):  # asking for what it has is fine
            pass
        with pytest.raises(lwmq.MessageTooLarge):
            pub.publish(b"t", bytes(100))
        with pytest.raises(TypeError):
            pub.publish([b"a"], b"x")
        for not_pairs in ([b"t", b"x"], [(b"t",)], [[b"t", b"x"]]):
            with pytest.raises(TypeError, match="pairs"):
                pub.publish_many(not_pairs)
        with pytest.raises(TypeError):
            lwmq.Subscriber(bus, topics=b"AAPL")  # a list is needed
        with pytest.raises(ValueError):
            lwmq.Subscriber(bus, start="yesterday")
    for bad in ["bus://", "bus://a/b", "bus://has space"]:
        with pytest.raises(lwmq.AddressError):
            lwmq.Publisher(bad)
    with pytest.raises(ValueError):
        lwmq.Publisher(bus, capacity=1)
    closed = lwmq.Publisher(bus)
    closed.close()
    with pytest.raises(lwmq.ChannelClosed):
        closed.publish(b"t", b"x")


def test_multi_frame_messages_and_delivery_fields(bus):
    import numpy as np

    with lwmq.Subscriber(bus, topics=["AAPL"]) as sub, lwmq.Publisher(bus) as pub:
        t0 = time.time_ns()
        seq = pub.publish("AAPL", [b"header", np.arange(10, dtype=np.float64)])
        d = sub.recv(timeout=1)
        assert (d.seq, d.topic, d.publisher, d.lost, len(d.message)) == (seq, b"AAPL", pub.id, 0, 2)
        assert d.message[0].tobytes() == b"header"
        assert np.frombuffer(d.message[1], dtype=np.float64).tolist() == list(range(10))
        assert t0 <= d.timestamp_ns <= time.time_ns() and d.nbytes == 6 + 80
        assert sub.try_recv() is None


def test_an_idle_subscriber_sleeps_instead_of_spinning(bus):
    """A subscriber with nothing to read sleeps on the tail's futex once its spin is over: blocked in
    recv for a second, the whole process uses a small fraction of a core (a spinning one uses all of it)."""
    with lwmq.Publisher(bus), lwmq.Subscriber(bus) as sub:
        cpu, wall = time.process_time(), time.perf_counter()
        with pytest.raises(lwmq.Timeout):
            sub.recv(timeout=1.0)
        used = (time.process_time() - cpu) / (time.perf_counter() - wall)
    assert used < 0.2, f"{used:.0%} of a core while idle"


def test_a_blocked_recv_is_interrupted_by_ctrl_c(bus):
    with lwmq.Subscriber(bus) as sub:
        timer = threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):  # recv() without a timeout returns only by a signal
            sub.recv()
        timer.join()


def test_iteration_ends_when_the_subscriber_is_closed(bus):
    with lwmq.Publisher(bus) as pub:
        sub = lwmq.Subscriber(bus)
        for i in range(3):
            pub.publish(b"t", bytes([i]))
        threading.Timer(0.2, sub.close).start()
        assert [d.message[0].tobytes() for d in sub] == [b"\0", b"\1", b"\2"]


def test_recv_batch_gives_columns_and_deliveries(bus):
    with lwmq.Subscriber(bus) as sub, lwmq.Publisher(bus) as pub:
        assert len(sub.recv_batch(timeout=0)) == 0
        n = pub.publish_many([(f"t{i % 3}", [b"h", bytes(i)]) for i in range(10)])
        assert n == 10
        batch = sub.recv_batch(timeout=1)
        assert len(batch) == 10 and batch.lost == 0
        assert list(batch.seqs) == list(range(10))
        assert list(batch.sizes) == [1 + i for i in range(10)]
        assert set(batch.publishers) == {pub.id} and len(set(batch.timestamps_ns)) == 1  # one publish time
        assert batch.topics == [f"t{i % 3}".encode() for i in range(10)]
        assert batch[-1].seq == 9 and [d.seq for d in batch] == list(range(10))
        with pytest.raises(IndexError):
            batch[10]
