"""Every error of the contract, raised in the situation the contract names (several are also raised in
the area's own tests; this file is the index)."""

import pytest

import lwmq

CONTRACT = {
    "Timeout": (TimeoutError,),
    "MessageTooLarge": (ValueError,),
    "AddressError": (ValueError,),
    "UnsupportedScheme": (lwmq.AddressError,),
    "AddressInUse": (OSError,),
    "PeerGone": (ConnectionError,),
    "ChannelClosed": (),
    "ProtocolError": (),
    "QueueFull": (),
}


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_hierarchy(name):
    cls = getattr(lwmq, name)
    assert issubclass(cls, lwmq.Error)
    for base in CONTRACT[name]:
        assert issubclass(cls, base)


def test_timeout(pair):
    with pytest.raises(lwmq.Timeout):
        pair[1].recv(timeout=0.01)


def test_message_too_large(make_pair):
    client, _ = make_pair(buffer_size=512)
    with pytest.raises(lwmq.MessageTooLarge, match="buffer_size"):
        client.send(b"x" * 1000)


def test_address_errors(closer, uri):
    with pytest.raises(lwmq.AddressError):
        lwmq.listen("no-scheme")
    with pytest.raises(lwmq.UnsupportedScheme):
        lwmq.listen("nope://x")
    closer(lwmq.listen(uri))
    with pytest.raises(lwmq.AddressInUse):
        lwmq.listen(uri)


def test_peer_gone_to_receiver_and_sender(pair):
    client, server = pair
    client.close()
    with pytest.raises(lwmq.PeerGone):
        server.recv(timeout=1)
    with pytest.raises(lwmq.PeerGone):
        server.send(b"anyone?")


def test_channel_closed(pair):
    pair[0].close()
    with pytest.raises(lwmq.ChannelClosed):
        pair[0].send(b"x")


def test_queue_full(make_pair):
    client, _ = make_pair(buffer_size=256, send_buffers=1)
    client.send(b"x" * 208)  # fills the only buffer (no room left to add another message)
    q = client.queue(producers="many", capacity=1)
    q.post(b"1")  # taken by the encoder, which holds it until a buffer is free
    q.post(b"2")  # waits in the queue, which is now full
    with pytest.raises(lwmq.QueueFull):
        q.post(b"3", timeout=0.01)


def test_protocol_error_tears_the_channel_down(closer, uri):
    """A peer that ships garbage: the receiving channel raises ProtocolError, is torn down, and the peer
    learns it is gone; nothing crashes."""
    listener = closer(lwmq.listen(uri))
    rogue = closer(lwmq.raw_connect(uri))  # speaks buffers, not the wire format
    victim = closer(listener.accept(timeout=5))
    rogue.send(b"LWMQ\x01\x00\x00\x00 this is not a valid body")
    with pytest.raises(lwmq.ProtocolError, match="body length"):
        victim.recv(timeout=5)
    with pytest.raises(lwmq.ProtocolError):  # the channel stays failed
        victim.send(b"x")
    with pytest.raises(lwmq.PeerGone):  # torn down: the rogue's end sees it
        rogue.send(b"more", timeout=5)
