"""lwmq's exceptions. Every one subclasses :class:`Error`; several also subclass the built-in exception a
Python user would catch for that situation (``Timeout`` is a ``TimeoutError``, and so on)."""

from __future__ import annotations


class Error(Exception):
    """Base class of every lwmq error."""


class Timeout(Error, TimeoutError):
    """A timeout expired. For a send, ``exc.message`` holds the message that was not sent."""


class MessageTooLarge(Error, ValueError):
    """A message cannot fit one transport buffer; nothing of it was sent."""


class AddressError(Error, ValueError):
    """A URI is malformed."""


class UnsupportedScheme(AddressError):
    """No transport claims the URI's scheme."""


class AddressInUse(Error, OSError):
    """Listening on an address that is taken."""


class PeerGone(Error, ConnectionError):
    """The peer closed or died. Messages it shipped before are delivered first."""


class ChannelClosed(Error):
    """The channel (or listener) was closed locally."""


class ProtocolError(Error):
    """The peer sent malformed data; the channel is torn down."""


class QueueFull(Error):
    """A bounded queue is full and the timeout expired. ``exc.message`` holds the message not posted."""


class BusMismatch(Error, ValueError):
    """Joining a bus with a capacity, max_message_size or backpressure setting other than the one its
    creator fixed."""


__all__ = [
    "Error", "Timeout", "MessageTooLarge", "AddressError", "UnsupportedScheme", "AddressInUse", "PeerGone",
    "ChannelClosed", "ProtocolError", "QueueFull", "BusMismatch",
]
