"""Transport filters: providers that wrap a built-in provider through the same interface, to count, log
or audit its traffic. Install one through the ``lwmq.transports`` entry-point group, e.g. in a
package's pyproject.toml::

    [project.entry-points."lwmq.transports"]
    counted-inproc = "lwmq.filters:CountingFilter"

From then on every ``inproc://`` channel of that environment runs through the filter, with no change to
application code. Subclass and set ``schemes`` to filter other transports.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

from . import _core
from .errors import Timeout

log = logging.getLogger("lwmq.filters")


class _CountedLink:
    """A built-in link whose shipped and received buffers are counted (and logged at DEBUG)."""

    def __init__(self, inner: _core.RawLink, filt: CountingFilter) -> None:
        self._inner = inner
        self._filter = filt
        self.buffer_size = inner.buffer_size
        self.peer = inner.peer

    def acquire(self, timeout: float | None) -> _core.TxBuffer | None:
        return self._inner.acquire(timeout)

    def ship(self, buffer: _core.TxBuffer, nbytes: int) -> None:
        self._inner.ship(buffer, nbytes)  # the built-in's own buffer: no copy through the filter
        self._filter._count("buffers_sent", "bytes_sent", nbytes)
        log.debug("%s: shipped %d bytes to %s", self._filter.name, nbytes, self.peer)

    def recv(self, timeout: float | None) -> _core.Frame | None:
        frame = self._inner.recv(timeout)
        if frame is not None:
            self._filter._count("buffers_received", "bytes_received", len(frame))
            log.debug("%s: received %d bytes from %s", self._filter.name, len(frame), self.peer)
        return frame

    @property
    def pressed(self) -> bool:
        return self._inner.pressed

    def close(self) -> None:
        self._inner.close()


class _CountedListener:
    def __init__(self, inner: _core.RawListener, filt: CountingFilter) -> None:
        self._inner = inner
        self._filter = filt
        self.address = inner.address

    def accept(self, timeout: float | None) -> _CountedLink | None:
        try:
            return _CountedLink(self._inner.accept(timeout), self._filter)
        except Timeout:
            return None

    def close(self) -> None:
        self._inner.close()


class CountingFilter:
    """Wraps the built-in provider of ``schemes`` and counts buffers and bytes both ways."""

    name = "counting-filter"
    schemes: tuple[str, ...] = ("inproc",)
    capabilities: tuple[str, ...] = ("send", "receive")

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, buffers: str, nbytes: str, n: int) -> None:
        with self._lock:
            self.counts[buffers] += 1
            self.counts[nbytes] += n

    def listen(self, uri: str, options: dict[str, Any]) -> _CountedListener:
        return _CountedListener(_core.raw_listen(uri, **options), self)

    def connect(self, uri: str, timeout: float | None, options: dict[str, Any]) -> _CountedLink:
        return _CountedLink(_core.raw_connect(uri, timeout, **options), self)
