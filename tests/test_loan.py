"""Zero-copy sends: ch.loan(n) lends a transport buffer; the producer writes in place; ship(k) sends it."""

import numpy as np
import pytest

import lwmq


@pytest.fixture(params=["inproc", "ipc"])
def loan_pair(request, closer, uri, ipc_uri):
    address = uri if request.param == "inproc" else ipc_uri
    listener = closer(lwmq.listen(address, buffer_size=1 << 16))
    client = closer(lwmq.connect(address, timeout=5, buffer_size=1 << 16))
    server = closer(listener.accept(timeout=5))
    return client, server


def test_write_in_place_and_ship(loan_pair):
    client, server = loan_pair
    with client.loan(100) as buf:
        assert len(buf) == 100
        buf[:5] = b"hello"
        buf.ship(5)
        assert buf.shipped
    m = server.recv(timeout=5)
    assert len(m) == 1 and bytes(m[0]) == b"hello"


def test_numpy_fills_the_loan(loan_pair):
    client, server = loan_pair
    values = np.linspace(0, 1, 1000, dtype=np.float32)
    with client.loan(values.nbytes) as buf:
        arr = np.frombuffer(buf, dtype=np.float32)
        arr[:] = values
        with pytest.raises(BufferError, match="release every view"):
            buf.ship(values.nbytes)  # the array still views the memory
        del arr
        buf.ship(values.nbytes)
    assert np.array_equal(np.frombuffer(server.recv(timeout=5)[0], dtype=np.float32), values)


def test_a_shipped_loan_cannot_be_written(loan_pair):
    client, _ = loan_pair
    buf = client.loan(10)
    buf.ship(0)
    with pytest.raises(BufferError, match="belongs to the peer"):
        memoryview(buf)
    with pytest.raises(ValueError, match="already shipped"):
        buf.ship(0)


def test_loan_given_back_sends_nothing(loan_pair):
    client, server = loan_pair
    with client.loan(10) as buf:
        buf[:3] = b"no!"
    client.send(b"yes")
    assert bytes(server.recv(timeout=5)[0]) == b"yes"
    assert server.try_recv() is None


def test_loan_keeps_the_order_of_earlier_sends(loan_pair):
    client, server = loan_pair
    client.send(b"first")
    with client.loan(6) as buf:
        buf[:6] = b"second"
        buf.ship(6)
    assert [bytes(server.recv(timeout=5)[0]) for _ in range(2)] == [b"first", b"second"]


def test_loan_larger_than_a_buffer(loan_pair):
    client, _ = loan_pair
    with pytest.raises(lwmq.MessageTooLarge):
        client.loan(1 << 16)
    with pytest.raises(ValueError, match="exceeds the loan"):
        client.loan(8).ship(9)
