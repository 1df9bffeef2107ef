"""The source's driver-side receiver: a thread that takes messages off a bus into the spool.

It resumes from the spool: after a restart it subscribes at the sequence after the last one spooled, so
nothing delivered before is taken twice and nothing after is skipped. What the bus no longer holds
(overwritten while the query was down, or while it ran too slowly) is counted, and either fails the
query (`failOnDataLoss`, the default, as Kafka's source does) or is logged and counted. Nothing is
skipped silently.
"""

from __future__ import annotations

import logging
import threading

import lwmq

from .spool import Spool

log = logging.getLogger("lwmq.spark")


class DataLoss(RuntimeError):
    """Messages fell out of the bus before the source could spool them (see failOnDataLoss)."""


class Follower:
    def __init__(self, url: str, spool_path: str, topics: list[bytes], prefixes: list[bytes], starting: str,
                 fail_on_data_loss: bool, join_timeout: float = 10.0) -> None:
        self.url = url
        self.fail_on_data_loss = fail_on_data_loss
        self.spool = Spool(spool_path, url)
        # A new query starts at what the spool held when it opened (everything after is news to it).
        self.start_count = self.spool.count
        self.lost = 0
        self.error: BaseException | None = None
        self._lock = threading.Lock()  # the spool
        self._recv_lock = threading.Lock()  # receive-and-append, so the spool keeps the bus's order
        self._stop = threading.Event()
        resume = self.spool.last_seq
        start: str | int = "oldest" if starting == "earliest" else "latest"
        if resume is not None:
            start = resume + 1
        self.sub = lwmq.Subscriber(url, topics=topics or None, prefixes=prefixes or None, start=start, timeout=join_timeout)
        bus_id = self.sub.info()["created_ns"]
        known = self.spool.meta.get("bus_id")
        if known is not None and known != bus_id and resume is not None:
            # The bus we followed is gone (all its members left) and a new one took its name: whatever it
            # published after our last sequence is lost, and we cannot even count it.
            self._loss(f"{url} was recreated while the source was down: messages after sequence {resume} of the "
                       f"previous bus are lost (count unknown)", None)
            if self.error is None:  # going on: follow the new bus from the oldest message it holds
                self.sub.close()
                self.sub = lwmq.Subscriber(url, topics=topics or None, prefixes=prefixes or None, start="oldest",
                                           timeout=join_timeout)
                self.spool.set_bus_id(bus_id)
            # Failing: the old bus id stays in the spool, so every later start fails the same way.
        elif known != bus_id:
            self.spool.set_bus_id(bus_id)
        self._thread = threading.Thread(target=self._run, name="lwmq-spark-follower", daemon=True)
        self._thread.start()

    def _loss(self, what: str, count: int | None) -> None:
        if self.fail_on_data_loss:
            self.error = DataLoss(what + " (set failOnDataLoss=false to count such losses and go on)")
            self._stop.set()
            return
        # Going on: the loss is counted for good (spool meta), so a restart does not count it again.
        key = "lost" if count else "lost_unknown"
        self.spool.meta[key] = self.spool.meta.get(key, 0) + (count or 1)
        self.spool._write_meta(self.spool.meta)
        self.lost += count or 0
        log.warning("%s; going on (failOnDataLoss=false)", what)

    def _take(self, batch) -> None:
        with self._lock:
            for d in batch:
                if d.lost:
                    self._loss(f"{self.url}: {d.lost} messages before sequence {d.seq} fell out of the bus "
                               f"before they were spooled", d.lost)
                    if self._stop.is_set():
                        return
                m = d.message
                self.spool.append(d.seq, d.publisher, d.timestamp_ns, d.topic, [f.tobytes() for f in m.frames])

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with self._recv_lock:
                    batch = self.sub.recv_batch(65536, timeout=0.1)
                    if len(batch):
                        self._take(batch)
        except BaseException as e:  # noqa: BLE001 - reported to Spark by the next latestOffset
            if not self._stop.is_set():
                self.error = e

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def durable_count(self) -> int:
        """Flushes and fsyncs the spool; every offset below the returned count may be handed to Spark."""
        self.check()
        with self._lock:
            self.spool.flush(sync=True)
            return self.spool.count

    def drain_now(self) -> None:
        """Takes everything the bus holds for us right now (Trigger.AvailableNow)."""
        while True:
            self.check()
            with self._recv_lock:
                if self.sub.info()["tail"] <= self.sub.position:
                    return
                batch = self.sub.recv_batch(65536, timeout=0.05)
                if len(batch):
                    self._take(batch)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sub.close()
        with self._lock:
            self.spool.close()
