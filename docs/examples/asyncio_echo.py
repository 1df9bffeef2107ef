"""asyncio: an echo peer and a client with several requests in flight."""

import asyncio

import lwmq


async def main() -> None:
    with lwmq.listen("inproc://echo") as listener, lwmq.connect("inproc://echo") as client:
        server = listener.accept(timeout=5)

        async def echo() -> None:
            for _ in range(3):
                await server.send_async(await server.recv_async(timeout=5))

        task = asyncio.create_task(echo())
        for word in (b"one", b"two", b"three"):
            await client.send_async(word)
        replies = [bytes((await client.recv_async(timeout=5))[0]) for _ in range(3)]
        await task
        print(replies)
        server.close()


asyncio.run(main())
