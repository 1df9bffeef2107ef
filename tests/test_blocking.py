"""Blocking calls release the GIL and stay interruptible by Ctrl-C."""

import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import lwmq


def test_a_blocked_recv_lets_other_threads_run(pair):
    client, server = pair
    got = []
    blocked = threading.Thread(target=lambda: got.append(server.recv(timeout=60)))
    blocked.start()
    progress = 0
    while blocked.is_alive() and progress < 100_000:
        progress += 1  # only runs while the other thread has given up the GIL
    assert blocked.is_alive() and progress == 100_000
    client.send(b"wake up")  # now release it
    blocked.join(timeout=30)
    assert [bytes(m[0]) for m in got] == [b"wake up"]


BLOCKERS = {
    "recv": "server.recv()",
    "send": "client.send(b'x' * 200)\nwhile True: client.send(b'x' * 200)",
    "accept": "listener.accept()",
    "ipc-recv": "ipc_server.recv()",
}


@pytest.mark.parametrize("what", sorted(BLOCKERS))
def test_ctrl_c_interrupts_a_blocked_call(what):
    script = textwrap.dedent("""
        import lwmq, os
        name = f"ctrl-c-{os.getpid()}"
        listener = lwmq.listen(f"inproc://{name}", buffer_size=256, send_buffers=1, send_hwm=1)
        client = lwmq.connect(f"inproc://{name}", buffer_size=256, send_buffers=1, send_hwm=1)
        server = listener.accept(timeout=5)
        ipc_listener = lwmq.listen(f"ipc://{name}")
        ipc_client = lwmq.connect(f"ipc://{name}")
        ipc_server = ipc_listener.accept(timeout=5)
        print("ready", flush=True)
    """) + BLOCKERS[what] + "\n"
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
        proc.wait()
    # An uncaught KeyboardInterrupt ends Python by re-raising SIGINT (-2), after printing its traceback.
    assert proc.returncode == -signal.SIGINT and "KeyboardInterrupt" in err, err
