"""``lwmq ping``: two peers exchange messages over the best transport available; prints messages/s and
round-trip latency. Across processes when a cross-process transport is built in (ipc://, tcp://),
otherwise between two threads over inproc:// (and it says so)."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from .. import build_profile, connect, listen, transports

PREFERENCE = ("ipc", "tcp", "inproc")


def best_url() -> str:
    schemes = {t.scheme for t in transports()}
    scheme = next(s for s in PREFERENCE if s in schemes)
    tag = f"lwmq-demo-{os.getpid()}"
    return f"tcp://127.0.0.1:0" if scheme == "tcp" else f"{scheme}://{tag}"


def _peer(url: str, messages: int, round_trips: int, ready: Any) -> None:
    """The other side: receives the throughput run, then echoes every message of the latency run."""
    with connect(url, timeout=10) as ch:
        ready.set()
        got = 0
        nbytes = 0
        while got < messages:
            for m in ch.recv_many(4096, timeout=10):
                got += 1
                nbytes += m.nbytes
        ch.send([b"done", str(got).encode(), str(nbytes).encode()])
        for _ in range(round_trips):
            ch.send(ch.recv(timeout=10))


def run(url: str | None, messages: int, size: int, round_trips: int) -> int:
    console = Console()
    url = url or best_url()
    cross_process = not url.startswith("inproc://")
    where = "two processes" if cross_process else "two threads of one process (no cross-process transport yet)"
    console.print(f"[bold]lwmq demo[/] over [cyan]{url}[/] between {where}; {build_profile} build")
    with listen(url) as listener:
        if cross_process:
            ctx = multiprocessing.get_context("spawn")
            ready: Any = ctx.Event()
            peer: Any = ctx.Process(target=_peer, args=(url, messages, round_trips, ready), daemon=True)
        else:
            ready = threading.Event()
            peer = threading.Thread(target=_peer, args=(url, messages, round_trips, ready), daemon=True)
        peer.start()
        with listener.accept(timeout=30) as ch:
            payload = os.urandom(size)
            with console.status(f"sending {messages:,} messages of {size} B..."):
                start = time.perf_counter()
                for _ in range(messages):
                    ch.send(payload)
                done = ch.recv(timeout=60)
                elapsed = time.perf_counter() - start
            received, nbytes = int(bytes(done[1])), int(bytes(done[2]))
            assert bytes(done[0]) == b"done" and received == messages and nbytes == messages * size
            stats = ch.stats()
            with console.status(f"{round_trips:,} round trips..."):
                rtts = []
                ping = os.urandom(16)
                for _ in range(round_trips):
                    t = time.perf_counter()
                    ch.send(ping)
                    ch.recv(timeout=10)
                    rtts.append(time.perf_counter() - t)
        peer.join(timeout=10)
    rtts.sort()
    pct = lambda q: rtts[min(len(rtts) - 1, int(q * len(rtts)))] * 1e6  # noqa: E731
    table = Table(title=f"lwmq over {url.split('://')[0]}://")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row(f"throughput, {size} B messages, per-message send", f"{messages / elapsed:,.0f} msg/s")
    table.add_row("bandwidth", f"{messages * size / elapsed / 1e6:,.1f} MB/s")
    table.add_row("messages per transport buffer (clubbing)", f"{stats['messages_per_buffer']:.1f}")
    table.add_row("round trip p50 (16 B)", f"{pct(0.50):.1f} µs")
    table.add_row("round trip p99 (16 B)", f"{pct(0.99):.1f} µs")
    table.add_row("checked", f"{received:,} messages, {nbytes:,} bytes, all received")
    console.print(table)
    return 0
