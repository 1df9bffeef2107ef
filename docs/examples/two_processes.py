"""Two processes over shared memory: a worker squares numbers sent by the parent."""

import multiprocessing
import os

import lwmq


def worker(url: str) -> None:
    with lwmq.connect(url, timeout=10) as ch:
        for message in ch:  # until the parent closes its end
            n = int.from_bytes(bytes(message[0]), "little")
            ch.send((n * n).to_bytes(8, "little"))


if __name__ == "__main__":
    url = f"ipc://squares-{os.getpid()}"
    with lwmq.listen(url) as listener:
        child = multiprocessing.get_context("spawn").Process(target=worker, args=(url,))
        child.start()
        with listener.accept(timeout=10) as ch:
            for n in range(1, 6):
                ch.send(n.to_bytes(8, "little"))
            print([int.from_bytes(bytes(ch.recv(timeout=10)[0]), "little") for _ in range(5)])
        child.join(timeout=10)
    print("worker exit code", child.exitcode)
