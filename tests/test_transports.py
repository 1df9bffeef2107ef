"""The transport registry: built-ins, entry-point providers taking priority, URI errors."""

import pytest

import lwmq
import lwmq.providers
from conftest import install_entry_point


def test_builtin_inproc_is_listed():
    info = [t for t in lwmq.transports() if t.scheme == "inproc"]
    assert info[-1].origin == "builtin" and "zero-copy" in info[-1].capabilities


@pytest.mark.parametrize("bad", ["nothing", "inproc:/x", "://x", "9p://x", "inproc://", "inproc://has space"])
def test_malformed_uri_raises_address_error(bad):
    with pytest.raises(lwmq.AddressError):
        lwmq.listen(bad)
    with pytest.raises(ValueError):
        lwmq.connect(bad, timeout=0)


def test_unknown_scheme_raises_unsupported_scheme():
    with pytest.raises(lwmq.UnsupportedScheme, match="carrier-pigeon"):
        lwmq.connect("carrier-pigeon://coop", timeout=0)
    assert issubclass(lwmq.UnsupportedScheme, lwmq.AddressError)


@pytest.fixture
def counting_entry_point(tmp_path, monkeypatch):
    """Installs lwmq.filters.CountingFilter for inproc:// through a real entry point."""
    install_entry_point(tmp_path, monkeypatch, "counted-inproc = lwmq.filters:CountingFilter")
    lwmq.providers.reload()
    yield
    monkeypatch.undo()
    lwmq.providers.reload()


def test_entry_point_provider_overrides_the_builtin(counting_entry_point, closer, uri):
    listed = [t for t in lwmq.transports() if t.scheme == "inproc"]
    assert [t.origin for t in listed] == ["entry-point", "builtin"]
    assert listed[0].name == "counting-filter"
    provider = lwmq.providers.external_provider("inproc")

    listener = closer(lwmq.listen(uri))
    client = closer(lwmq.connect(uri, timeout=5))
    server = closer(listener.accept(timeout=5))
    for i in range(100):
        client.send([b"k", i.to_bytes(2, "little")])
    got = [server.recv(timeout=5) for _ in range(100)]
    assert [int.from_bytes(bytes(m[1]), "little") for m in got] == list(range(100))
    server.send(b"reply")
    assert bytes(client.recv(timeout=5)[0]) == b"reply"

    # Every buffer the channels shipped went through the filter, and it saw them arrive.
    shipped = client.stats()["buffers_sent"] + server.stats()["buffers_sent"]
    assert provider.counts["buffers_sent"] == shipped
    assert provider.counts["buffers_received"] == shipped
    assert provider.counts["bytes_sent"] == provider.counts["bytes_received"] > 100 * 2


def test_filtered_channel_reports_peer_gone(counting_entry_point, closer, uri):
    listener = closer(lwmq.listen(uri))
    client = closer(lwmq.connect(uri, timeout=5))
    server = closer(listener.accept(timeout=5))
    client.send(b"last words")
    client.close()
    assert bytes(server.recv(timeout=5)[0]) == b"last words"
    with pytest.raises(lwmq.PeerGone):
        server.recv(timeout=5)
