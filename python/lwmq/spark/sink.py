"""The `lwmq` streaming sink: each row becomes one message to an ipc:// listener or a bus://, tagged
with the Spark task attempt that wrote it; the driver's commit names the winning attempts and the
batch id, so `lwmq.spark.ResultReceiver` delivers each micro-batch exactly once (see results.py for the
protocol). Append and complete output modes; Python sinks do not support update mode.

Options: url (ipc://NAME or bus://NAME, required), sinkId (what the receiver deduplicates batch ids
by; default: the checkpoint location if Spark passes it, else the url), commitTimeout (seconds the
driver waits for an ipc:// receiver to acknowledge a commit, default 60).
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

import lwmq


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, Row):
        return value.asDict(recursive=True)
    raise TypeError(f"cannot send a {type(value).__name__} as JSON")


@dataclass
class LwmqCommitMessage(WriterCommitMessage):
    task: int
    partition: int
    rows: int


class _Out:
    """Where an executor's rows go: a channel to the receiver, or the bus."""

    def __init__(self, url: str) -> None:
        self.bus = url.startswith("bus://")
        self.target = lwmq.Publisher(url) if self.bus else lwmq.connect(url, timeout=30)
        self.pending: list = []

    def send(self, header: bytes, body: bytes) -> None:
        if self.bus:
            self.target.publish(b"lwmq.spark", [header, body], timeout=60)
        else:
            self.pending.append([header, body])
            if len(self.pending) == 512:
                self.flush()

    def flush(self) -> None:
        if self.pending:
            self.target.send_many(self.pending, timeout=60)
            self.pending = []

    def close(self) -> None:
        self.flush()
        self.target.close()  # a channel ships everything queued before it closes (linger)


class LwmqStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        self.url = options["url"]
        if not self.url.startswith(("ipc://", "bus://")):
            raise ValueError(f"the lwmq sink writes to ipc:// or bus://, not {self.url!r}")
        self.sink_id = options.get("sinkid") or options.get("checkpointlocation") or options.get("path") or self.url
        self.mode = "complete" if overwrite else "append"
        self.commit_timeout = float(options.get("committimeout", 60))

    def write(self, iterator: Iterator[Row]) -> LwmqCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task, partition = ctx.taskAttemptId(), ctx.partitionId()
        header = json.dumps({"k": "rows", "sink": self.sink_id, "task": task}).encode()
        out = _Out(self.url)
        rows = 0
        try:
            for row in iterator:
                out.send(header, json.dumps(row.asDict(recursive=True), default=_json_default).encode())
                rows += 1
        finally:
            out.close()
        return LwmqCommitMessage(task, partition, rows)

    def _control(self, header: dict) -> None:
        body = json.dumps(header).encode()
        if self.url.startswith("bus://"):
            with lwmq.Publisher(self.url) as pub:
                pub.publish(b"lwmq.spark", [body], timeout=self.commit_timeout)
            return
        with lwmq.connect(self.url, timeout=self.commit_timeout) as ch:
            ch.send([body])
            reply = json.loads(ch.recv(timeout=self.commit_timeout)[0].tobytes())
        if "error" in reply:
            raise RuntimeError(f"lwmq result receiver refused batch {header.get('batch')}: {reply['error']}")

    def commit(self, messages: list[LwmqCommitMessage | None], batchId: int) -> None:
        parts = [[m.task, m.rows] for m in messages if m is not None]
        self._control({"k": "commit", "sink": self.sink_id, "batch": batchId, "mode": self.mode, "parts": parts})

    def abort(self, messages: list[LwmqCommitMessage | None], batchId: int) -> None:
        tasks = [m.task for m in messages if m is not None]
        try:
            self._control({"k": "abort", "sink": self.sink_id, "batch": batchId, "tasks": tasks})
        except lwmq.Error:
            pass  # nothing was delivered for an aborted batch; its staged rows go at the next commit
