"""asyncio support for channels: ``await ch.recv_async()`` and ``await ch.send_async(msg)``.

A receive that can complete at once does so without a thread. Otherwise the wait runs in a worker thread
in short slices; if the awaiting task is cancelled after a slice took a message, the message is put back at
the head of the channel's output queue, so cancellation never loses a message.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .errors import Timeout

_SLICE = 0.05


async def recv_async(channel: Any, timeout: float | None = None) -> Any:
    message = channel.try_recv()
    if message is not None:
        return message
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise Timeout("timed out: nothing received")
        wait = _SLICE if left is None else min(_SLICE, left)
        future = loop.run_in_executor(None, channel.recv_many, 1, wait)
        try:
            got = await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(lambda f: _put_back(channel, f))
            raise
        if got:
            return got[0]


def _put_back(channel: Any, future: Any) -> None:
    if not future.cancelled() and future.exception() is None:
        for message in reversed(future.result()):
            channel._unrecv(message)


async def send_async(channel: Any, message: Any, timeout: float | None = None) -> None:
    try:
        channel.send(message, timeout=0)
        return
    except Timeout:
        pass  # the send queue is full: wait for room in a worker thread
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, lambda: channel.send(message, timeout=timeout))
