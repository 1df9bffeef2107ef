"""The README's example: a request on one channel, an urgent message on a high-priority queue."""

import lwmq

with lwmq.listen("inproc://quotes") as listener, lwmq.connect("inproc://quotes") as client:
    server = listener.accept(timeout=5)
    client.send([b"AAPL", b"189.52"])  # one message, two frames, atomic
    msg = server.recv(timeout=1)  # frames are zero-copy views
    print(bytes(msg[0]), bytes(msg[1]))  # b'AAPL' b'189.52'
    urgent = client.queue(priority="high")  # weighted round-robin over priority groups
    urgent.post(b"cancel all")
    print(server.recv(timeout=1)[0].tobytes())  # b'cancel all'
    server.close()
