"""Fixtures own every resource: channels and listeners are closed at teardown even when a test fails.
A global timeout (pyproject: timeout = 120) turns a hang into a failure."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

import lwmq

_names = itertools.count()


@pytest.fixture
def uri() -> str:
    """A fresh inproc address for this test."""
    return f"inproc://test-{os.getpid()}-{next(_names)}"


@pytest.fixture
def closer() -> Iterator[Callable]:
    """Registers objects with a close() method; closes them all at teardown (latest first)."""
    owned: list = []

    def own(obj):
        owned.append(obj)
        return obj

    yield own
    for obj in reversed(owned):
        obj.close()


def install_entry_point(tmp_path, monkeypatch, line: str) -> None:
    """Installs a provider through a real entry point of the lwmq.transports group (a dist-info on
    sys.path), as a package would; lwmq.providers.reload() makes lwmq see it."""
    dist = tmp_path / "lwmq_test_provider-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lwmq-test-provider\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[lwmq.transports]\n{line}\n")
    monkeypatch.syspath_prepend(str(tmp_path))


PEERS = os.path.join(os.path.dirname(__file__), "peers.py")


@pytest.fixture
def spawn():
    """spawn(role, url, *args) -> Popen of tests/peers.py, started and ready; killed at teardown."""
    procs: list[subprocess.Popen] = []

    def start(role: str, url: str, *args: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, PEERS, role, url, *args], stdout=subprocess.PIPE, text=True)
        procs.append(p)
        line = p.stdout.readline()
        assert line == "ready\n", f"peer {role} did not start: {line!r}"
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)
        p.stdout.close()


@pytest.fixture
def ipc_uri() -> str:
    """A fresh ipc address (abstract namespace: nothing on disk)."""
    return f"ipc://test-{os.getpid()}-{next(_names)}"


@pytest.fixture
def make_pair(closer, uri) -> Callable[..., tuple[lwmq.Channel, lwmq.Channel]]:
    """make_pair(**options) -> (client, server): a connected pair over inproc, owned by the test."""
    count = itertools.count()

    def make(**options) -> tuple[lwmq.Channel, lwmq.Channel]:
        address = f"{uri}-{next(count)}"
        listener = closer(lwmq.listen(address, **options))
        client = closer(lwmq.connect(address, timeout=5, **options))
        server = closer(listener.accept(timeout=5))
        return client, server

    return make


@pytest.fixture
def pair(make_pair) -> tuple[lwmq.Channel, lwmq.Channel]:
    return make_pair()


def wait_for(condition, timeout: float = 5.0) -> bool:
    """Polls `condition` until it holds or `timeout` passes (for effects another thread completes)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def engine_threads() -> int:
    """lwmq's own OS threads in this process (Python's threading module cannot see them)."""
    count = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                count += f.read().startswith("lwmq-")
        except FileNotFoundError:
            pass  # the thread ended while we looked
    return count
