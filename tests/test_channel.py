import threading

import numpy as np
import pytest

import lwmq
from conftest import engine_threads, wait_for


def test_send_forms_and_atomic_multi_frame(pair):
    client, server = pair
    client.send(b"one")
    client.send([b"k", b"v"])
    client.send((b"a", bytearray(b"b"), memoryview(b"c")))
    client.send(lwmq.Message(b"m", b"n"))
    got = [[bytes(f) for f in server.recv(timeout=1)] for _ in range(4)]
    assert got == [[b"one"], [b"k", b"v"], [b"a", b"b", b"c"], [b"m", b"n"]]


def test_send_many_mixes_single_and_multi_frame_messages(pair):
    client, server = pair
    client.send_many([b"one", [b"k", b"v"], lwmq.Message(b"m", b"n", b"o"), memoryview(b"view"), (b"a", b"")])
    got = [[bytes(f) for f in server.recv(timeout=1)] for _ in range(5)]
    assert got == [[b"one"], [b"k", b"v"], [b"m", b"n", b"o"], [b"view"], [b"a", b""]]


def test_both_directions(pair):
    client, server = pair
    client.send(b"ping")
    assert bytes(server.recv(timeout=1)[0]) == b"ping"
    server.send(b"pong")
    assert bytes(client.recv(timeout=1)[0]) == b"pong"


def test_received_frames_are_zero_copy_numpy_views(pair):
    client, server = pair
    arr = np.random.default_rng(1).random(1000)
    client.send([b"tensor", arr])
    m = server.recv(timeout=1)
    view = np.frombuffer(m[1], dtype=np.float64)
    assert np.array_equal(view, arr)
    # A view of transport memory: the frame's buffer and the array share their address.
    assert view.ctypes.data == np.frombuffer(m[1], dtype=np.uint8).ctypes.data
    assert view.ctypes.data % 8 == 0, "frames are 8-byte aligned"


def test_send_many_recv_many_try_recv(pair):
    client, server = pair
    assert server.try_recv() is None
    client.send_many([str(i).encode() for i in range(500)])
    got = []
    while len(got) < 500:
        got += server.recv_many(max_messages=128, timeout=1)
    assert [bytes(m[0]) for m in got] == [str(i).encode() for i in range(500)]
    assert client.stats()["buffers_sent"] < 500


def test_recv_batch_columns_and_messages(pair):
    client, server = pair
    empty = server.recv_batch(timeout=0)
    assert len(empty) == 0 and list(empty.sizes) == []
    payloads = [bytes([i % 256]) * (i % 7 + 1) for i in range(300)]
    client.send_many(payloads[:100])
    for p in payloads[100:]:
        client.send(p)  # one by one: they grow the buffer the server has not taken yet
    client.send([b"two", b"frames"])
    got = []
    while sum(len(b) for b in got) < 301:
        got.append(server.recv_batch(max_messages=64, timeout=1))
    assert all(len(b) <= 64 for b in got)
    sizes = [n for b in got for n in b.sizes]
    assert sizes == [len(p) for p in payloads] + [9]
    assert sum(b.nbytes for b in got) == sum(sizes)
    messages = [m for b in got for m in b]
    assert [bytes(m[0]) for m in messages[:300]] == payloads
    assert [bytes(f) for f in got[-1][-1]] == [b"two", b"frames"]
    with pytest.raises(IndexError):
        got[0][len(got[0])]
    with pytest.raises(ValueError):
        server.recv_batch(max_messages=0)


def test_iteration_ends_when_the_peer_closes(pair):
    client, server = pair
    for i in range(3):
        client.send(bytes([i]))
    client.close()
    assert [bytes(m[0]) for m in server] == [b"\x00", b"\x01", b"\x02"]


def test_blocked_recv_wakes_with_peer_gone(pair):
    client, server = pair
    threading.Timer(0.1, client.close).start()
    with pytest.raises(lwmq.PeerGone):  # woken by the close: running out the timeout would raise Timeout
        server.recv(timeout=30)


def test_recv_timeout(pair):
    _, server = pair
    with pytest.raises(lwmq.Timeout):
        server.recv(timeout=0.05)
    with pytest.raises(TimeoutError):  # also the built-in class
        server.recv(timeout=0)


def test_closed_channel_refuses_everything(pair):
    client, _ = pair
    client.close()
    assert client.closed
    with pytest.raises(lwmq.ChannelClosed):
        client.send(b"x")
    with pytest.raises(lwmq.ChannelClosed):
        client.recv(timeout=0.1)
    client.close()  # idempotent


def test_listener_accepts_many_peers(closer, uri):
    listener = closer(lwmq.listen(uri))
    clients = [closer(lwmq.connect(uri)) for _ in range(5)]
    servers = [closer(listener.accept(timeout=1)) for _ in range(5)]
    for i, c in enumerate(clients):
        c.send(bytes([i]))
    assert sorted(bytes(s.recv(timeout=1)[0]) for s in servers) == [bytes([i]) for i in range(5)]


def test_connect_without_listener_times_out(uri):
    with pytest.raises(lwmq.Timeout, match="no listener"):
        lwmq.connect(uri, timeout=0.05)


def test_address_in_use(closer, uri):
    closer(lwmq.listen(uri))
    with pytest.raises(lwmq.AddressInUse):
        lwmq.listen(uri)
    with pytest.raises(OSError):
        lwmq.listen(uri)


def test_options_are_checked(uri):
    with pytest.raises(TypeError, match="unknown option 'bufer_size'"):
        lwmq.listen(uri, bufer_size=10)
    with pytest.raises(ValueError, match="buffer_size"):
        lwmq.listen(uri, buffer_size=10)
    with pytest.raises(ValueError, match="weight 0"):
        lwmq.listen(uri, priorities={"a": 0})


def test_pool_geometry_per_direction(make_pair):
    client, server = make_pair(buffer_size=4096, send_buffers=3500, recv_buffers=500)
    assert client.buffer_size == server.buffer_size == 4096
    assert client.max_message_size == 4096 - 16


def test_close_ships_what_is_queued(make_pair):
    client, server = make_pair(send_buffers=1, buffer_size=256)
    for i in range(100):
        client.send(i.to_bytes(4, "little"))
    got = []
    reader = threading.Thread(target=lambda: got.extend(server.recv(timeout=5) for _ in range(100)))
    reader.start()
    client.close(linger=5)
    reader.join()
    assert [int.from_bytes(bytes(m[0]), "little") for m in got] == list(range(100))
    assert client.stats()["unsent_at_close"] == 0


def test_no_threads_left_behind(closer, uri):
    before = engine_threads()
    listener = lwmq.listen(uri, send_buffers=1, buffer_size=256)
    client = lwmq.connect(uri, send_buffers=1, buffer_size=256)
    server = listener.accept(timeout=1)
    for _ in range(50):  # backlog: starts the flusher thread
        client.send(b"x" * 100)
    assert wait_for(lambda: engine_threads() == before + 1)  # the flusher (named once it runs)
    for obj in (client, server, listener):
        obj.close()
    assert engine_threads() == before  # close() joined it


def test_stats_count_both_ways(pair):
    client, server = pair
    client.send([b"ab", b"cde"])
    server.recv(timeout=1)
    s, r = client.stats(), server.stats()
    assert (s["messages_sent"], s["bytes_sent"], s["buffers_sent"]) == (1, 5, 1)
    assert (r["messages_received"], r["bytes_received"], r["buffers_received"]) == (1, 5, 1)
