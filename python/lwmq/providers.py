"""The transport registry as Python sees it: built-in providers (compiled into the engine) and external
providers found through the entry-point group ``lwmq.transports``. An external provider for a scheme takes
priority over the built-in one, so it can replace or wrap (filter) it.

An external provider is an object (or a class, instantiated without arguments) with::

    name: str                       # e.g. "counting-filter"
    schemes: Sequence[str]          # e.g. ["inproc"]
    capabilities: Sequence[str]     # e.g. ["send", "receive"]
    def listen(self, uri: str, options: dict) -> listener   # accept(timeout) -> link | None, close(), address
    def connect(self, uri: str, timeout: float | None, options: dict) -> link

and a link is the Transport Layer Interface itself:

    buffer_size: int                                  # bytes one buffer carries
    def acquire(self, timeout) -> writable buffer | None   # a free buffer (None: timed out)
    def ship(self, buffer, nbytes) -> None            # hand its first nbytes to the peer
    def recv(self, timeout) -> bytes-like | None      # next shipped buffer (None: timed out)
    def close(self) -> None
    peer: str                                         # optional, for messages
    pressed: bool                                     # optional: the application holds 3/4 of the receive
                                                      # buffers (absent: taken as True, messages copied out)

Raise ``lwmq.PeerGone`` when the peer left and ``lwmq.ChannelClosed`` after close; any other exception
is taken as the transport failing (``ProtocolError``). ``lwmq.raw_connect`` / ``lwmq.raw_listen`` give a
built-in transport's links at this same level, which is how a filter wraps a built-in provider (its
``acquire`` lends the built-in's own buffer, so a filter adds no copy). The queuing layer (queues, priorities,
clubbing, decoding) runs over any such link unchanged.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from . import _core
from .errors import UnsupportedScheme

GROUP = "lwmq.transports"


@dataclass(frozen=True)
class TransportInfo:
    scheme: str
    name: str
    capabilities: tuple[str, ...]
    origin: str  # "builtin" | "entry-point"


_lock = threading.Lock()
_external: dict[str, Any] | None = None


def _load_external() -> dict[str, Any]:
    """Scheme -> provider object, from installed entry points (loaded once; see `reload`)."""
    global _external
    with _lock:
        if _external is None:
            found: dict[str, Any] = {}
            for ep in entry_points(group=GROUP):
                provider = ep.load()
                if isinstance(provider, type):
                    provider = provider()
                for scheme in provider.schemes:
                    found[scheme.lower()] = provider
            _external = found
        return _external


def reload() -> None:
    """Forgets loaded entry points, so providers installed since are found."""
    global _external
    with _lock:
        _external = None


def external_provider(scheme: str) -> Any | None:
    return _load_external().get(scheme.lower())


def transports() -> list[TransportInfo]:
    """Every transport lwmq can use now; for a scheme claimed twice, the one that wins comes first."""
    infos = []
    external = _load_external()
    for scheme, provider in sorted(external.items()):
        infos.append(TransportInfo(scheme, provider.name, tuple(provider.capabilities), "entry-point"))
    for name, schemes, caps in _core.builtin_transports():
        for scheme in schemes:
            infos.append(TransportInfo(scheme, name, tuple(caps), "builtin"))
    return infos


def resolve(uri: str) -> tuple[str, Any | None]:
    """(scheme, external provider or None). Raises AddressError / UnsupportedScheme."""
    scheme, _rest = _core.split_uri(uri)
    provider = external_provider(scheme)
    if provider is None:
        _core.check_uri(uri)  # the built-in provider parses its own address
    return scheme, provider


__all__ = ["TransportInfo", "transports", "reload", "resolve", "UnsupportedScheme", "GROUP"]
