"""The transport conformance suite: the channel contract every transport must keep. A transport lands
only when it passes; to add one, add an entry to TRANSPORTS (a URI factory and how to install it)."""

from __future__ import annotations

import itertools
import os
import threading

import pytest

import lwmq
import lwmq.providers
from conftest import install_entry_point

_n = itertools.count()


def _inproc() -> str:
    return f"inproc://conformance-{os.getpid()}-{next(_n)}"


def _install_counting_filter(tmp_path, monkeypatch):
    install_entry_point(tmp_path, monkeypatch, "counted-inproc = lwmq.filters:CountingFilter")


def _ipc() -> str:
    return f"ipc://conformance-{os.getpid()}-{next(_n)}"


# name -> (address factory, installer or None). Both ends run in this process; tests/test_ipc.py covers
# ipc:// across processes.
TRANSPORTS = {
    "inproc": (_inproc, None),
    "ipc": (_ipc, None),
    "inproc+entry-point-filter": (_inproc, _install_counting_filter),
}


@pytest.fixture(params=sorted(TRANSPORTS))
def connect_pair(request, tmp_path, monkeypatch, closer):
    make_address, install = TRANSPORTS[request.param]
    if install is not None:
        install(tmp_path, monkeypatch)
    lwmq.providers.reload()

    def connect(**options):
        address = make_address()
        listener = closer(lwmq.listen(address, **options))
        client = closer(lwmq.connect(address, timeout=5, **options))
        server = closer(listener.accept(timeout=5))
        return client, server

    yield connect
    monkeypatch.undo()
    lwmq.providers.reload()


def test_order_and_integrity_under_backpressure(connect_pair):
    client, server = connect_pair(buffer_size=4096, send_buffers=4)
    n = 5000
    got: list[bytes] = []

    def read():
        for _ in range(n):
            got.append(bytes(server.recv(timeout=10)[0]))

    reader = threading.Thread(target=read)
    reader.start()
    sizes = [1, 7, 64, 1000, 4000]
    for i in range(n):
        size = sizes[i % len(sizes)]
        client.send(i.to_bytes(4, "little") * (size // 4 + 1))
    reader.join()
    assert len(got) == n
    for i, data in enumerate(got):
        size = sizes[i % len(sizes)]
        assert data == i.to_bytes(4, "little") * (size // 4 + 1)


def test_multi_frame_messages_arrive_whole(connect_pair):
    client, server = connect_pair()
    frames = [b"", b"a", b"b" * 100, bytes(range(256))]
    for k in range(1, len(frames) + 1):
        client.send(frames[:k])
    for k in range(1, len(frames) + 1):
        assert [bytes(f) for f in server.recv(timeout=5)] == frames[:k]


def test_both_directions_at_once(connect_pair):
    client, server = connect_pair(buffer_size=1024, send_buffers=2)
    n = 2000

    def pump(ch, tag):
        for i in range(n):
            ch.send([tag, i.to_bytes(4, "little")])

    threads = [threading.Thread(target=pump, args=(c, t)) for c, t in ((client, b"c"), (server, b"s"))]
    for t in threads:
        t.start()
    from_client = [int.from_bytes(bytes(server.recv(timeout=10)[1]), "little") for _ in range(n)]
    from_server = [int.from_bytes(bytes(client.recv(timeout=10)[1]), "little") for _ in range(n)]
    for t in threads:
        t.join()
    assert from_client == list(range(n)) and from_server == list(range(n))


def test_largest_message_fits_and_one_more_byte_does_not(connect_pair):
    client, server = connect_pair(buffer_size=8192)
    biggest = client.max_message_size - 16  # one frame: record header 8 + frame header 8
    client.send(b"x" * biggest)
    assert len(server.recv(timeout=5)[0]) == biggest
    with pytest.raises(lwmq.MessageTooLarge):
        client.send(b"x" * (biggest + 1))


def test_peer_gone_after_the_last_shipped_message(connect_pair):
    client, server = connect_pair()
    for i in range(10):
        client.send(bytes([i]))
    client.close()
    assert [bytes(m[0]) for m in server] == [bytes([i]) for i in range(10)]
    with pytest.raises(lwmq.PeerGone):
        server.recv(timeout=5)


def test_blocked_receiver_wakes_when_the_peer_closes(connect_pair):
    client, server = connect_pair()
    threading.Timer(0.1, client.close).start()
    with pytest.raises(lwmq.PeerGone):
        server.recv(timeout=30)


def test_local_close(connect_pair):
    client, _server = connect_pair()
    client.close()
    with pytest.raises(lwmq.ChannelClosed):
        client.recv(timeout=1)
    with pytest.raises(lwmq.ChannelClosed):
        client.send(b"x")
