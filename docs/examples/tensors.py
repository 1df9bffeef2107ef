"""Moving numpy arrays: a header frame with shape and dtype, then the array's bytes; the receiver gets a
zero-copy view of the transport buffer."""

import json
import threading

import numpy as np

import lwmq


def producer(url: str) -> None:
    with lwmq.connect(url) as ch:
        for step in range(3):
            batch = np.full((4, 8), step, dtype=np.float32)
            header = json.dumps({"shape": batch.shape, "dtype": str(batch.dtype)}).encode()
            ch.send([header, batch])


with lwmq.listen("inproc://tensors", buffer_size=1 << 20) as listener:
    thread = threading.Thread(target=producer, args=("inproc://tensors",))
    thread.start()
    with listener.accept(timeout=5) as ch:
        for message in ch:  # ends when the producer closes
            meta = json.loads(bytes(message[0]))
            array = np.frombuffer(message[1], dtype=meta["dtype"]).reshape(meta["shape"])
            print(array.shape, array.dtype, float(array.mean()))
    thread.join()
