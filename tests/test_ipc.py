"""ipc:// across processes: every peer is a child process owned by the `spawn` fixture."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import statistics
import struct
import threading
import time

import pytest

import lwmq
from conftest import engine_threads, wait_for
from peers import SIZES


def our_fds() -> list[str]:
    """Descriptors of this process that are lwmq's kind: memfd segments and Unix sockets."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "lwmq" in target or target.startswith("socket:"):
            found.append(target)
    return found


def test_echo_across_processes(closer, spawn, ipc_uri):
    listener = closer(lwmq.listen(ipc_uri))
    spawn("echo", ipc_uri)
    ch = closer(listener.accept(timeout=10))
    assert "pid" in ch.peer
    for k in range(1, 4):
        ch.send([bytes([k]) * k] * k)
        assert [bytes(f) for f in ch.recv(timeout=10)] == [bytes([k]) * k] * k


def _receive_all(ch: lwmq.Channel, count: int, check) -> None:
    got = 0
    while got < count:
        for m in ch.recv_many(4096, timeout=30):
            check(m, got)
            got += 1
    ch.send(b"thanks")


def test_ten_million_mixed_sizes_in_order(closer, spawn, ipc_uri):
    n = 10_000_000
    listener = closer(lwmq.listen(ipc_uri, buffer_size=1 << 20))
    spawn("source", ipc_uri, str(n))
    ch = closer(listener.accept(timeout=10))

    def check(m, expected):
        assert int.from_bytes(m[0], "little") == expected  # none lost, none duplicated, in order
        assert len(m[1]) == SIZES[expected % 64]

    _receive_all(ch, n, check)
    assert ch.stats()["messages_received"] == n


def test_three_producers_on_three_priorities_keep_their_order(closer, spawn, ipc_uri):
    n = 9_999_999  # 10 million, split evenly over the three producers
    listener = closer(lwmq.listen(ipc_uri, buffer_size=1 << 20))
    spawn("source-priorities", ipc_uri, str(n))
    ch = closer(listener.accept(timeout=10))
    next_seq = [0, 1, 2]

    def check(m, _):
        head = bytes(m[0])
        p, seq = head[0], int.from_bytes(head[1:], "little")
        assert seq == next_seq[p], f"producer {p}: got {seq}, expected {next_seq[p]}"
        assert len(m[1]) == SIZES[seq % 64]
        next_seq[p] += 3

    _receive_all(ch, n, check)
    assert [s - p for p, s in enumerate(next_seq)] == [n // 3 * 3] * 3


def _kill_and_time(proc, blocked_call) -> tuple[type, float]:
    """Kills `proc` while `blocked_call` is blocked; returns the error it raised and the delay."""
    outcome: dict = {}

    def run():
        try:
            blocked_call()
        except BaseException as e:  # noqa: BLE001 - reported to the test below
            outcome["error"] = e
            outcome["at"] = time.monotonic()

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.05)  # let it block
    killed = time.monotonic()
    proc.send_signal(signal.SIGKILL)
    t.join(timeout=10)
    assert not t.is_alive(), "the blocked call never woke"
    return type(outcome["error"]), outcome["at"] - killed


def test_sigkilled_peer_wakes_a_blocked_recv_and_a_blocked_send(closer, spawn, ipc_uri):
    listener = closer(lwmq.listen(ipc_uri, buffer_size=4096, send_buffers=2, send_hwm=4))
    p1 = spawn("hold", ipc_uri)
    ch = closer(listener.accept(timeout=10))
    error, delay = _kill_and_time(p1, lambda: ch.recv(timeout=30))
    assert error is lwmq.PeerGone and delay < 0.1, (error, delay)

    p2 = spawn("hold", ipc_uri)
    ch2 = closer(listener.accept(timeout=10))

    def flood():
        while True:
            ch2.send(b"x" * 4000, timeout=30)  # blocks once the peer's pool and the queue are full

    error, delay = _kill_and_time(p2, flood)
    assert error is lwmq.PeerGone and delay < 0.1, (error, delay)


def test_messages_shipped_before_death_are_delivered_first(closer, spawn, ipc_uri):
    listener = closer(lwmq.listen(ipc_uri, buffer_size=1 << 20))
    proc = spawn("source", ipc_uri, "1000")
    ch = closer(listener.accept(timeout=10))
    time.sleep(0.3)  # the source has shipped everything and waits for our answer
    proc.kill()
    proc.wait()
    got = [int.from_bytes(m[0], "little") for m in ch]  # iteration ends at PeerGone
    assert got == list(range(1000))


def test_a_hundred_kills_leave_nothing_behind(closer, spawn, ipc_uri):
    shm_before = set(os.listdir("/dev/shm"))
    fds_before = our_fds()
    listener = closer(lwmq.listen(ipc_uri, buffer_size=4096, send_buffers=4, recv_buffers=4))
    delays = []
    for _ in range(100):
        proc = spawn("hold", ipc_uri)
        ch = listener.accept(timeout=10)
        error, delay = _kill_and_time(proc, lambda: ch.recv(timeout=30))
        assert error is lwmq.PeerGone
        delays.append(delay)
        ch.close()
    listener.close()
    assert statistics.median(delays) < 0.1 and max(delays) < 2, delays
    assert set(os.listdir("/dev/shm")) == shm_before
    assert wait_for(lambda: our_fds() == fds_before), our_fds()
    assert wait_for(lambda: engine_threads() == 0)  # listener and liveness threads are gone too


def test_uid_not_allowed_is_refused_and_logged(closer, ipc_uri, caplog):
    listener = closer(lwmq.listen(ipc_uri, allowed_uids=[os.getuid() + 1]))
    with pytest.raises(lwmq.PeerGone, match=f"uid {os.getuid()} is not in allowed_uids"):
        lwmq.connect(ipc_uri, timeout=5)
    with caplog.at_level("WARNING", logger="lwmq"), pytest.raises(lwmq.Timeout):
        listener.accept(timeout=0.2)
    assert any("not in allowed_uids" in r.getMessage() for r in caplog.records)


def test_scribbling_peer_gets_protocol_error_and_others_go_on(closer, spawn, ipc_uri):
    listener = closer(lwmq.listen(ipc_uri))
    spawn("echo", ipc_uri)
    good = closer(listener.accept(timeout=10))
    spawn("scribble", ipc_uri)
    victim = closer(listener.accept(timeout=10))
    with pytest.raises(lwmq.ProtocolError):
        for _ in range(1000):
            victim.send(b"x")
            victim.recv(timeout=5)
    good.send(b"still here")
    assert bytes(good.recv(timeout=10)[0]) == b"still here"


def test_out_of_range_descriptor_is_a_protocol_error(closer, spawn, ipc_uri):
    listener = closer(lwmq.listen(ipc_uri))
    spawn("forge", ipc_uri)
    ch = closer(listener.accept(timeout=10))
    with pytest.raises(lwmq.ProtocolError, match="out of range"):
        ch.recv(timeout=10)


def test_a_slot_pushed_but_never_written_is_a_protocol_error(closer, spawn, ipc_uri):
    listener = closer(lwmq.listen(ipc_uri))
    spawn("forge", ipc_uri, f"value={2**64 - 1}")  # what a claimed slot holds
    ch = closer(listener.accept(timeout=10))
    with pytest.raises(lwmq.ProtocolError, match="never written"):
        ch.recv(timeout=10)


def test_a_buffer_left_half_grown_by_a_peer_that_died_is_reported_lost(closer, spawn, ipc_uri):
    """A sender killed while appending to its last shipped buffer leaves that slot marked busy: the
    receiver never delivers part of it, and says so when the peer is gone."""
    listener = closer(lwmq.listen(ipc_uri))
    peer = spawn("forge", ipc_uri, f"value={(1 << 63) | 64}")  # buffer 0, 64 bytes, busy
    ch = closer(listener.accept(timeout=10))
    with pytest.raises(lwmq.Timeout):  # busy: not delivered while its writer might still finish it
        ch.recv(timeout=0.2)
    peer.kill()
    peer.wait()
    with pytest.raises(lwmq.PeerGone, match="messages of that buffer are lost"):
        ch.recv(timeout=10)


def test_wrong_version_hello_is_refused_with_a_clear_reason(closer, ipc_uri, caplog):
    listener = closer(lwmq.listen(ipc_uri))
    name = ipc_uri.removeprefix("ipc://")
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.connect(b"\0lwmq:" + name.encode())
        s.send(b"LWMQIPC\0" + struct.pack("<IIQII", 99, 1, 0, 0, 0))
        answer = s.recv(1024)
    assert answer[:8] == b"LWMQIPC\0" and struct.unpack("<I", answer[12:16])[0] == 1
    assert b"version mismatch: peer speaks ipc protocol 99" in answer
    with caplog.at_level("WARNING", logger="lwmq"), pytest.raises(lwmq.Timeout):
        listener.accept(timeout=0.2)
    assert any("version mismatch" in r.getMessage() for r in caplog.records)
    # The listener goes on serving well-behaved peers.
    client = closer(lwmq.connect(ipc_uri, timeout=5))
    server = closer(listener.accept(timeout=5))
    client.send(b"ok")
    assert bytes(server.recv(timeout=5)[0]) == b"ok"


def test_connector_refuses_a_listener_of_another_version(ipc_uri):
    name = ipc_uri.removeprefix("ipc://")
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as server:
        server.bind(b"\0lwmq:" + name.encode())
        server.listen()

        def answer():
            conn, _ = server.accept()
            conn.recv(1024)
            conn.send(b"LWMQIPC\0" + struct.pack("<II", 7, 0) + bytes(32))
            conn.close()

        t = threading.Thread(target=answer)
        t.start()
        with pytest.raises(lwmq.ProtocolError, match="listener speaks ipc protocol 7"):
            lwmq.connect(ipc_uri, timeout=5)
        t.join()


def test_a_thousand_channels_between_two_processes(closer, spawn, ipc_uri):
    options = {"buffer_size": 4096, "send_buffers": 2, "recv_buffers": 2}
    listener = closer(lwmq.listen(ipc_uri, **options))
    proc = spawn("many", ipc_uri, "1000", *(f"{k}={v}" for k, v in options.items()))
    chans = [closer(listener.accept(timeout=30)) for _ in range(1000)]
    values = {}
    for ch in chans:
        values[ch] = int.from_bytes(bytes(ch.recv(timeout=30)[0]), "little")
    assert sorted(values.values()) == list(range(1000))
    chans[0].close()  # one channel closing leaves the others alone
    for ch in chans[1:]:
        ch.send((values[ch] * 2).to_bytes(4, "little"))
    assert proc.stdout.readline() == "answered 999 gone 1\n"  # each channel on its own


def test_pool_split_3500_500_of_4000_buffers(closer, ipc_uri):
    listener = closer(lwmq.raw_listen(ipc_uri))
    client = closer(lwmq.raw_connect(ipc_uri, buffer_size=4096, send_buffers=3500, recv_buffers=500))
    server = closer(listener.accept(timeout=5))
    for link, count in ((client, 3500), (server, 500)):
        lent = [link.acquire(timeout=0) for _ in range(count)]
        assert all(b is not None for b in lent)
        assert link.acquire(timeout=0) is None  # exactly `count` buffers in this direction
        for b in lent:
            link.ship(b, 16)
    assert sum(1 for _ in iter(lambda: server.recv(timeout=0), None)) == 3500
    assert sum(1 for _ in iter(lambda: client.recv(timeout=0), None)) == 500


def test_a_64_mib_buffer(closer, spawn, ipc_uri):
    size = 64 << 20
    listener = closer(lwmq.listen(ipc_uri, buffer_size=size, send_buffers=2, recv_buffers=2))
    payload = size - 16 - 8 - 40 - 8  # the buffer, less the wire format's headers and the digest frame
    spawn("big", ipc_uri, str(payload), f"buffer_size={size}")
    ch = closer(listener.accept(timeout=10))
    m = ch.recv(timeout=60)
    assert len(m[1]) == payload
    assert hashlib.sha256(m[1]).digest() == bytes(m[0])
    ch.send(b"ok")


def test_filesystem_socket_is_private_and_removed(closer, tmp_path):
    path = tmp_path / "svc.sock"
    uri = f"ipc://{path}"
    listener = lwmq.listen(uri)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(lwmq.AddressInUse):
        lwmq.listen(uri)
    client = closer(lwmq.connect(uri, timeout=5))
    server = closer(listener.accept(timeout=5))
    client.send(b"via the file system")
    assert bytes(server.recv(timeout=5)[0]) == b"via the file system"
    listener.close()
    assert not path.exists()


def test_stale_socket_file_is_reclaimed(closer, tmp_path):
    path = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(str(path))
    s.close()  # a listener that died: its file stays, nobody listens
    closer(lwmq.listen(f"ipc://{path}"))


@pytest.mark.parametrize("bad", ["ipc://", "ipc://a b", "ipc://" + "x" * 101, "ipc:///" + "p" * 120])
def test_malformed_ipc_addresses(bad):
    with pytest.raises(lwmq.AddressError):
        lwmq.listen(bad)


@pytest.mark.parametrize("mode", [{"busy_poll": 1}, {"spin_us": 0}, {"spin_us": 500}])
def test_wake_up_modes(closer, spawn, ipc_uri, mode):
    listener = closer(lwmq.listen(ipc_uri, **mode))
    spawn("echo", ipc_uri, *(f"{k}={v}" for k, v in mode.items()))
    ch = closer(listener.accept(timeout=10))
    for i in range(2000):
        ch.send(i.to_bytes(4, "little"))
        assert int.from_bytes(bytes(ch.recv(timeout=10)[0]), "little") == i


def test_abstract_address_in_use(closer, ipc_uri):
    closer(lwmq.listen(ipc_uri))
    with pytest.raises(lwmq.AddressInUse):
        lwmq.listen(ipc_uri)
