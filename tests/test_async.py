import asyncio

import pytest

import lwmq


def test_send_and_recv_async(pair):
    client, server = pair

    async def main():
        await client.send_async(b"hello")
        got = await server.recv_async(timeout=2)
        waiter = asyncio.create_task(server.recv_async(timeout=5))
        await asyncio.sleep(0.05)
        await client.send_async([b"later", b"!"])
        return got, await waiter

    got, later = asyncio.run(main())
    assert bytes(got[0]) == b"hello"
    assert [bytes(f) for f in later] == [b"later", b"!"]


def test_recv_async_timeout(pair):
    with pytest.raises(lwmq.Timeout):
        asyncio.run(pair[1].recv_async(timeout=0.05))


def test_cancelled_recv_async_loses_nothing(pair):
    """Cancel receives at every stage (before, while and after a message arrives); every message ends up
    either as a finished task's result or still in the channel, never in between."""
    client, server = pair
    n = 60

    async def main():
        results = 0
        for i in range(n):
            task = asyncio.create_task(server.recv_async())
            await asyncio.sleep(0.0005 * (i % 7))  # the task may be waiting in a worker slice by now
            client.send(i.to_bytes(2, "little"))
            await asyncio.sleep(0.0005 * (i % 5))
            task.cancel()
            try:
                await task
                results += 1  # finished before the cancel: the task owns that message
            except asyncio.CancelledError:
                pass
        await asyncio.sleep(0.2)  # worker slices end and hand back what they took
        return results

    results = asyncio.run(main())
    left = []
    while (m := server.try_recv()) is not None:
        left.append(int.from_bytes(bytes(m[0]), "little"))
    assert results + len(left) == n, (results, left)
    assert left == sorted(left), "handed-back messages keep their order"
