"""Input queues, priority groups (weighted round-robin), and clubbing."""

import threading
from collections import Counter

import pytest

import lwmq


def _tag(m: lwmq.Message) -> tuple[str, int]:
    name, counter = bytes(m[0]).split(b":")
    return name.decode(), int(counter)


def _plug(client, server, size):
    """Fills every send buffer with one big message, so what is posted next has to wait in its queue."""
    sends = 0
    while client.stats()["buffer_waits"] == 0:
        client.send(b"P" * (client.max_message_size - 16))
        sends += 1
    return sends


def test_weights_8_4_1_give_those_shares_when_all_backlogged(make_pair):
    client, server = make_pair(buffer_size=4096, send_buffers=4, priorities={"high": 8, "normal": 4, "low": 1})
    plugs = _plug(client, server, 4096)
    queues = {p: client.queue(priority=p) for p in ("high", "normal", "low")}
    for i in range(1300):
        for p, q in queues.items():
            q.post(f"{p}:{i}".encode())
    assert client.stats()["queued"] >= 3 * 1300
    got = []
    while len(got) < plugs + 1300:
        got.append(server.recv(timeout=5))
    shares = Counter(_tag(m)[0] for m in got[plugs:] if bytes(m[0])[:1] != b"P")
    total = sum(shares.values())
    for p, w in (("high", 8), ("normal", 4), ("low", 1)):
        assert shares[p] / total == pytest.approx(w / 13, rel=0.10), shares


def test_round_robin_within_a_group_and_fifo_per_queue(make_pair):
    client, server = make_pair(buffer_size=4096, send_buffers=4)
    plugs = _plug(client, server, 4096)
    a, b, c = (client.queue(priority="low") for _ in range(3))
    for i in range(100):
        for name, q in (("a", a), ("b", b), ("c", c)):
            q.post(f"{name}:{i}".encode())
    got = [server.recv(timeout=5) for _ in range(plugs + 300)]
    tags = [_tag(m) for m in got if bytes(m[0])[:1] != b"P"]
    assert [t[0] for t in tags[:9]] == ["a", "b", "c"] * 3
    for name in "abc":
        assert [i for n, i in tags if n == name] == list(range(100))


def test_bounded_queue_blocks_then_raises_queue_full_handing_the_message_back(make_pair):
    client, _server = make_pair(buffer_size=256, send_buffers=1)
    _plug(client, _server, 256)
    q = client.queue(priority="normal", producers="many", capacity=3)
    for i in range(3):
        q.post(bytes([i]), timeout=0.1)
    with pytest.raises(lwmq.QueueFull) as exc:
        q.post(b"lost?", timeout=0.05)
    assert bytes(exc.value.message[0]) == b"lost?"
    assert len(q) == 3


def test_many_producers_keep_their_own_order(make_pair):
    client, server = make_pair(buffer_size=8192, send_buffers=8)
    shared = client.queue(priority="normal", producers="many", capacity=100)

    def produce(p):
        for i in range(2000):
            shared.post(f"{p}:{i}".encode())

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(3)]
    for t in threads:
        t.start()
    seen: dict[str, list[int]] = {}
    for _ in range(6000):
        name, i = _tag(server.recv(timeout=10))
        seen.setdefault(name, []).append(i)
    for t in threads:
        t.join()
    assert seen == {str(p): list(range(2000)) for p in range(3)}


def test_unknown_priority_and_bad_queue_options(pair):
    client, _ = pair
    with pytest.raises(ValueError, match="no priority group"):
        client.queue(priority="urgent")
    with pytest.raises(ValueError, match="'one' or 'many'"):
        client.queue(producers="some")
    with pytest.raises(ValueError, match="unbounded"):
        client.queue(producers="one", capacity=5)


def test_a_lone_message_is_shipped_at_once(pair):
    client, server = pair
    client.send(b"alone")
    # send() returned after shipping: the message is in the peer's pool already, no timer, no thread.
    assert client.stats()["buffers_sent"] == 1 and client.stats()["queued"] == 0
    assert bytes(server.try_recv()[0]) == b"alone"


def test_clubbing_under_load(make_pair):
    client, server = make_pair(buffer_size=65536, send_buffers=2)
    n = 50_000
    received = []
    reader = threading.Thread(target=lambda: received.extend(server.recv(timeout=10) for _ in range(n)))
    reader.start()
    for i in range(n):
        client.send(i.to_bytes(4, "little"))
    reader.join()
    assert [int.from_bytes(bytes(m[0]), "little") for m in received] == list(range(n))
    stats = client.stats()
    assert stats["messages_sent"] == n
    assert stats["messages_per_buffer"] > 2, stats  # the sender outpaced the transport: messages clubbed
    assert stats["max_messages_per_buffer"] > 10, stats


def test_message_too_large_is_refused_before_anything_is_sent(make_pair):
    client, server = make_pair(buffer_size=1024)
    with pytest.raises(lwmq.MessageTooLarge):
        client.send([b"a" * 600, b"b" * 600])
    with pytest.raises(ValueError):  # also a ValueError
        client.send_many([b"ok", b"x" * 2000])
    assert client.stats()["messages_sent"] == 0
    assert server.try_recv() is None
    client.send(b"x" * client.max_message_size)[0:0] if False else client.send(b"x" * (client.max_message_size - 16))
    assert len(server.recv(timeout=1)[0]) == client.max_message_size - 16
