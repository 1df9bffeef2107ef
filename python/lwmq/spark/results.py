"""The receiving end of the lwmq Spark sink: delivers each micro-batch exactly once.

Spark may run a micro-batch's write tasks more than once (a failed or speculative attempt, or a whole
batch re-run after a restart from the checkpoint). Executors tag every row they send with their task
attempt; the driver's commit names the attempts that won and how many rows each wrote. The receiver
stages rows per attempt and, on a commit, delivers exactly the winning rows as one `ResultBatch`, unless
it has already delivered that batch id for that sink (a re-run): the last delivered batch id per sink
is kept in a state file, written atomically, so this holds across receiver restarts too.

Wire protocol (frames of each lwmq message; the header is JSON):
    {"k": "rows", "sink": S, "task": T}, row JSON           one row of task attempt T
    {"k": "commit", "sink": S, "batch": B, "mode": M, "parts": [[T, rows], ...]}
    {"k": "abort", "sink": S, "batch": B, "tasks": [T, ...]}
Over ipc:// every executor task and the driver's commit connect to the receiver's listener; a commit is
answered with {"ack": B} once the batch is delivered (or found to be a duplicate), so the next batch
cannot overtake it. Over bus:// the bus's total order puts every row before the commit that names it.

A re-run is always of the last batch delivered (Spark re-runs only the batch its log has not committed).
A batch id *older* than that means another query writes under the same sink id (a new checkpoint with
an old receiver state): it is refused, never dropped as a duplicate, so no result is lost silently. A
refusal over ipc:// fails the writing query; over bus://, which has no way back to the writer, it (like
results the bus overwrote before they were read) is raised by `get()` and iteration.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import lwmq


class ResultsLost(lwmq.Error):
    """Results could not be delivered exactly once (overwritten on the bus, rows missing, or another query
    writing under the same sink id); raised by `ResultReceiver.get` and iteration."""


@dataclass
class ResultBatch:
    sink: str
    batch_id: int
    mode: str  # "append" or "complete" (the batch is the whole result table)
    rows: list[dict[str, Any]] = field(default_factory=list)
    received_ns: int = 0


class ResultReceiver:
    """Receives what a query writes with `writeStream.format("lwmq")` to `url` (ipc:// or bus://).

        with lwmq.spark.ResultReceiver("ipc://results", state="results.json") as rr:
            for batch in rr:            # ResultBatch, each batch id once
                ...
    """

    def __init__(self, url: str, state: str | None = None, commit_wait: float = 30.0, **bus_options: Any) -> None:
        self.url = url
        self._state_path = state
        self._commit_wait = commit_wait
        self._last: dict[str, int] = self._load_state()
        self._staged: dict[tuple[str, int], list[dict]] = {}
        self._cond = threading.Condition()
        # Delivered batches, or the error that stopped the receiver (raised to the application).
        self._out: queue.Queue[ResultBatch | Exception] = queue.Queue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.delivered = 0
        self.duplicates = 0
        if url.startswith("bus://"):
            self._sub = lwmq.Subscriber(url, **{"backpressure": True, **bus_options})
            self._listener = None
            self._spawn(self._follow_bus)
        else:
            self._sub = None
            self._listener = lwmq.listen(url)
            self._spawn(self._accept)

    # ------------------------------------------------------------------ state

    def _load_state(self) -> dict[str, int]:
        if self._state_path and os.path.exists(self._state_path):
            with open(self._state_path) as f:
                return {k: int(v) for k, v in json.load(f).items()}
        return {}

    def _save_state(self) -> None:
        if not self._state_path:
            return
        tmp = self._state_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self._last, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._state_path)

    def last_batch(self, sink: str) -> int | None:
        """The last batch id delivered for `sink`."""
        return self._last.get(sink)

    # ------------------------------------------------------------------ receiving

    def _spawn(self, target, *args) -> None:
        t = threading.Thread(target=target, args=args, name="lwmq-spark-results", daemon=True)
        t.start()
        self._threads.append(t)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                ch = self._listener.accept(timeout=0.1)
            except lwmq.Timeout:
                continue
            except lwmq.Error:
                return
            self._spawn(self._serve, ch)

    def _serve(self, ch) -> None:
        with ch:
            while not self._stop.is_set():
                try:
                    m = ch.recv(timeout=0.1)
                except lwmq.Timeout:
                    continue
                except (lwmq.PeerGone, lwmq.ChannelClosed):
                    return
                try:
                    reply = self._handle(m)
                except Exception as e:  # noqa: BLE001 - a bad message is answered, not fatal
                    reply = {"error": f"{type(e).__name__}: {e}"}
                if reply is not None:
                    ch.send(json.dumps(reply).encode())

    def _follow_bus(self) -> None:
        while not self._stop.is_set():
            for d in self._sub.recv_many(4096, timeout=0.1):
                if d.lost:
                    self._out.put(ResultsLost(f"{self.url}: {d.lost} result messages were overwritten before they were read"))
                    return
                reply = self._handle(d.message)
                if reply and "error" in reply:  # no way back to the writer: the application hears of it
                    self._out.put(ResultsLost(f"{self.url}: {reply['error']}"))
                    return

    def _handle(self, m) -> dict | None:
        header = json.loads(m[0].tobytes())
        kind, sink = header.get("k"), header.get("sink", "")
        if kind == "rows":
            row = json.loads(m[1].tobytes())
            with self._cond:
                self._staged.setdefault((sink, header["task"]), []).append(row)
                self._cond.notify_all()
            return None
        if kind == "commit":
            return self._commit(sink, int(header["batch"]), header.get("mode", "append"), header["parts"])
        if kind == "abort":
            with self._cond:
                for task in header.get("tasks", []):
                    self._staged.pop((sink, task), None)
            return {"ack": header.get("batch")}
        return {"error": f"unknown message kind {kind!r}"}

    def _commit(self, sink: str, batch: int, mode: str, parts: list) -> dict:
        deadline = time.monotonic() + self._commit_wait
        with self._cond:
            # Rows of the winning attempts were all shipped before their tasks finished, but over ipc they
            # come on other channels: wait until each attempt's count is in.
            while not all(len(self._staged.get((sink, t), ())) >= n for t, n in parts):
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = {t: (len(self._staged.get((sink, t), ())), n) for t, n in parts}
                    return {"error": f"batch {batch}: rows missing for attempts {missing}"}
                self._cond.wait(left)
            rows = [row for t, n in parts for row in self._staged.get((sink, t), [])[:n]]
            # Everything staged for this sink is this batch's (winning or failed attempts): drop it all.
            for key in [k for k in self._staged if k[0] == sink]:
                del self._staged[key]
            last = self._last.get(sink, -1)
            if batch < last:
                return {"error": (f"batch {batch} is older than batch {last}, already delivered for sink {sink!r}: another "
                                  "query writes under this sink id (give it its own checkpointLocation or sinkId)")}
            if batch == last:
                self.duplicates += 1  # a re-run of the batch delivered last
                return {"ack": batch, "duplicate": True}
            self._last[sink] = batch
            self._save_state()
            self.delivered += 1
        self._out.put(ResultBatch(sink, batch, mode, rows, time.time_ns()))
        return {"ack": batch}

    # ------------------------------------------------------------------ the application's side

    def get(self, timeout: float | None = None) -> ResultBatch:
        """The next delivered batch; raises lwmq.Timeout, or ResultsLost if results could not be delivered."""
        try:
            item = self._out.get(timeout=timeout)
        except queue.Empty:
            raise lwmq.Timeout("no result batch") from None
        if isinstance(item, Exception):
            self._out.put(item)  # every later call raises it too
            raise item
        return item

    def __iter__(self):
        while not self._stop.is_set():
            try:
                yield self.get(timeout=0.1)
            except lwmq.Timeout:
                continue

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        if self._listener is not None:
            self._listener.close()
        if self._sub is not None:
            self._sub.close()

    def __enter__(self) -> ResultReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
