"""lwmq: brokerless peer-to-peer messaging for Python.

    with lwmq.listen("inproc://quotes") as listener, lwmq.connect("inproc://quotes") as a:
        b = listener.accept(timeout=5)
        a.send([b"AAPL", b"189.5"])
        print(b.recv(timeout=1).frames)

Messages are built independently of channels (``lwmq.Message(b"k", memoryview(x), numpy_array)``);
channels are opened by URI and the URI's scheme picks the transport (see ``lwmq.transports()``).
Many-to-many publish/subscribe on one node: ``lwmq.Publisher("bus://ticks")`` and
``lwmq.Subscriber("bus://ticks", topics=[b"AAPL"])``.
"""

from __future__ import annotations

from typing import Any

from . import _core
from ._core import (
    Batch, Channel, Delivery, Frame, Listener, Loan, Message, MessageBatch, Publisher, Queue, RawLink, RawListener,
    Subscriber, build_profile,
)
from .errors import (
    AddressError,
    AddressInUse,
    BusMismatch,
    ChannelClosed,
    Error,
    MessageTooLarge,
    PeerGone,
    ProtocolError,
    QueueFull,
    Timeout,
    UnsupportedScheme,
)
from .providers import TransportInfo, resolve, transports

__version__: str = _core.__version__


def _check_options(options: dict[str, Any]) -> None:
    unknown = sorted(set(options) - set(_core.OPTIONS))
    if unknown:
        raise TypeError(f"unknown option {unknown[0]!r}; the options are {', '.join(_core.OPTIONS)}")


def listen(uri: str, **options: Any) -> Listener:
    """Listens on ``uri``; ``listener.accept(timeout)`` gives a Channel per peer."""
    _scheme, provider = resolve(uri)
    if provider is None:
        return _core.listen(uri, **options)
    _check_options(options)
    return _core.listener_over(provider.listen(uri, dict(options)), **options)


def connect(uri: str, timeout: float | None = 5.0, **options: Any) -> Channel:
    """Connects to ``uri``, waiting up to ``timeout`` seconds for a listener; returns a Channel."""
    _scheme, provider = resolve(uri)
    if provider is None:
        return _core.connect(uri, timeout, **options)
    _check_options(options)
    return _core.channel_over(provider.connect(uri, timeout, dict(options)), **options)


def raw_listen(uri: str, **options: Any) -> RawListener:
    """A built-in transport's listener at the buffer level (for transport providers and filters)."""
    return _core.raw_listen(uri, **options)


def raw_connect(uri: str, timeout: float | None = 5.0, **options: Any) -> RawLink:
    """A built-in transport's link at the buffer level (for transport providers and filters)."""
    return _core.raw_connect(uri, timeout, **options)


__all__ = [
    "Message", "MessageBatch", "Frame", "Channel", "Listener", "Loan", "Queue", "RawLink", "RawListener", "listen", "connect",
    "raw_listen", "raw_connect", "transports", "TransportInfo", "build_profile", "__version__",
    "Error", "Timeout", "MessageTooLarge", "AddressError", "UnsupportedScheme", "AddressInUse", "PeerGone",
    "ChannelClosed", "ProtocolError", "QueueFull", "BusMismatch", "Publisher", "Subscriber", "Delivery", "Batch",
]
