"""The `lwmq` data source: a Structured Streaming source reading a bus, a sink writing to a bus or an
ipc:// listener, and a batch reader of a spool. Registered by `lwmq.spark.register(spark)`.

Source options:
    url                bus://NAME (required for streaming)
    topics, prefixes   comma-separated topic filters (default: every topic)
    spool              the spool directory (default: ./lwmq-spool/NAME); one query per spool, and the
                       spool must outlive restarts like the checkpoint does
    startingOffsets    "latest" (default) or "earliest" (the oldest message the bus still holds), for a
                       spool that is new; an existing spool always resumes where it stopped
    failOnDataLoss     "true" (default): fail the query when messages fell out of the bus before they
                       were spooled; "false": log and count them, and go on
    maxRecordsPerTrigger   at most this many messages per micro-batch
    numPartitions      Spark partitions per micro-batch (default 2)
    payloadFormat      "binary" (default: a `payload` column), "json" (each message a JSON object) or
                       "arrow" (each message an Arrow IPC stream); for json and arrow, give the columns
                       with .schema(...): fields named topic, sequence, publisher, timestamp are filled
                       from the message's envelope, the others from the payload

Default schema: topic string, sequence long, publisher long, timestamp timestamp, payload binary.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from . import spool as spool_module
from .sink import LwmqStreamWriter

DEFAULT_SCHEMA = "topic string, sequence long, publisher long, timestamp timestamp, payload binary"
ENVELOPE = ("topic", "sequence", "publisher", "timestamp")


def _list(value: str | None) -> list[bytes]:
    return [t.strip().encode() for t in value.split(",") if t.strip()] if value else []


def _truthy(value: str | None, default: bool) -> bool:
    return default if value is None else value.strip().lower() in ("1", "true", "yes")


def _bus_name(url: str) -> str:
    if not url.startswith("bus://"):
        raise ValueError(f"the lwmq source reads bus:// addresses, not {url!r}")
    return url[len("bus://"):]


class SpoolRange(InputPartition):
    """Records start..end-1 of a spool."""

    def __init__(self, path: str, start: int, end: int) -> None:
        super().__init__((path, start, end))
        self.path, self.start, self.end = path, start, end


def _arrow_type(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")  # Spark wants timestamp[us, UTC] from a Python source


def records_to_batch(records: list[spool_module.Record], schema: StructType, payload_format: str) -> pa.RecordBatch:
    """Arrow columns for `schema` from spooled records."""
    arrow_schema = _arrow_type(schema)
    names = [f.name for f in schema.fields]
    envelope = {
        "topic": lambda r: r.topic.decode("utf-8", "replace"),
        "sequence": lambda r: r.seq,
        "publisher": lambda r: r.publisher,
        "timestamp": lambda r: r.timestamp_ns // 1000,  # microseconds, UTC
        "payload": lambda r: b"".join(r.frames),
    }
    if payload_format == "binary":
        columns = {n: [envelope[n](r) for r in records] if n in envelope else [None] * len(records) for n in names}
    elif payload_format == "json":
        columns = {n: [] for n in names}
        for r in records:
            obj = json.loads(b"".join(r.frames))
            for n in names:
                columns[n].append(envelope[n](r) if n in ENVELOPE else obj.get(n))
    elif payload_format == "arrow":
        columns = {n: [] for n in names}
        for r in records:
            with pa.ipc.open_stream(b"".join(r.frames)) as stream:
                table = stream.read_all()
            for n in names:
                if n in ENVELOPE:
                    columns[n].extend([envelope[n](r)] * table.num_rows)
                else:
                    columns[n].extend(table.column(n).to_pylist() if n in table.column_names else [None] * table.num_rows)
    else:
        raise ValueError(f"payloadFormat must be binary, json or arrow, not {payload_format!r}")
    arrays = []
    for field in arrow_schema:
        values = columns[field.name]
        if pa.types.is_timestamp(field.type) and field.name not in ENVELOPE:
            arrays.append(pa.array(values).cast(field.type))
        elif pa.types.is_timestamp(field.type):
            arrays.append(pa.array(values, type=pa.int64()).cast(field.type))
        else:
            arrays.append(pa.array(values, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


class LwmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are spool record numbers: {"n": count}. A receiver thread in the driver-side helper spools
    the bus; `latestOffset` makes what it hands out durable first; `read` (on executors) reads the spool;
    `commit` frees spool segments."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.url = options["url"]
        name = _bus_name(self.url)
        self.topics, self.prefixes = _list(options.get("topics")), _list(options.get("prefixes"))
        self.spool_path = os.path.abspath(options.get("spool") or os.path.join("lwmq-spool", name))
        self.starting = options.get("startingoffsets", "latest").lower()
        if self.starting not in ("latest", "earliest"):
            raise ValueError("startingOffsets is latest or earliest")
        self.fail_on_data_loss = _truthy(options.get("failondataloss"), True)
        self.max_rows = int(options["maxrecordspertrigger"]) if options.get("maxrecordspertrigger") else None
        self.num_partitions = max(1, int(options.get("numpartitions", 2)))
        self.payload_format = options.get("payloadformat", "binary").lower()
        self.schema = schema
        self._follower = None
        self._target: int | None = None

    def __getstate__(self) -> dict[str, Any]:  # executors get the plan, never the receiver thread
        state = dict(self.__dict__)
        state["_follower"] = None
        return state

    def _f(self):
        if self._follower is None:
            from .follower import Follower

            self._follower = Follower(self.url, self.spool_path, self.topics, self.prefixes, self.starting,
                                      self.fail_on_data_loss)
        return self._follower

    def initialOffset(self) -> dict:
        """Where the query's first micro-batch starts: fixed the first time it is asked and kept in the
        spool, because Spark asks again (and re-reads batch 0 from it) when it re-runs batch 0 after a
        restart. A spool belongs to one query (one checkpoint)."""
        f = self._f()
        meta = f.spool.meta
        if "initial" not in meta:
            meta["initial"] = f.start_count
            f.spool._write_meta(meta)
        return {"n": meta["initial"]}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        end = self._f().durable_count()
        if self._target is not None:
            end = min(end, self._target)
        if isinstance(limit, ReadMaxRows):
            end = min(end, start["n"] + limit.max_rows)
        return {"n": max(end, start["n"])}

    def reportLatestOffset(self) -> dict | None:
        """For the query's progress reports: what is spooled, and how many messages were lost (counted
        since the spool was made; only with failOnDataLoss=false can a query go on past a loss)."""
        f = self._follower
        if f is None:
            return None
        return {"n": f.spool.count, "lost": f.spool.meta.get("lost", 0), "lost_unknown": f.spool.meta.get("lost_unknown", 0)}

    def prepareForTriggerAvailableNow(self) -> None:
        f = self._f()
        f.drain_now()
        self._target = f.durable_count()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        a, b = start["n"], end["n"]
        if b <= a:
            return []
        n = min(self.num_partitions, b - a)
        cuts = [a + (b - a) * i // n for i in range(n + 1)]
        return [SpoolRange(self.spool_path, cuts[i], cuts[i + 1]) for i in range(n)]

    def read(self, partition: SpoolRange) -> Iterator[pa.RecordBatch]:
        batch: list[spool_module.Record] = []
        for record in spool_module.read_range(partition.path, partition.start, partition.end):
            batch.append(record)
            if len(batch) == 8192:
                yield records_to_batch(batch, self.schema, self.payload_format)
                batch = []
        if batch:
            yield records_to_batch(batch, self.schema, self.payload_format)

    def commit(self, end: dict) -> None:
        if self._follower is not None:
            self._follower.spool.release(end["n"])

    def stop(self) -> None:
        if self._follower is not None:
            self._follower.close()
            self._follower = None


class SpoolReader(DataSourceReader):
    """Batch `spark.read.format("lwmq").option("spool", DIR).load()`: every record the spool holds."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.path = os.path.abspath(options["spool"])
        self.schema = schema
        self.payload_format = options.get("payloadformat", "binary").lower()

    def partitions(self) -> list[InputPartition]:
        bases = spool_module._segments(self.path)
        ends = [b + len(spool_module._read_index(self.path, b)) for b in bases]
        return [SpoolRange(self.path, b, e) for b, e in zip(bases, ends) if e > b]

    def read(self, partition: SpoolRange) -> Iterator[pa.RecordBatch]:
        records = list(spool_module.read_range(partition.path, partition.start, partition.end))
        if records:
            yield records_to_batch(records, self.schema, self.payload_format)


class LwmqDataSource(DataSource):
    """`format("lwmq")`: see this module's docstring for the options."""

    @classmethod
    def name(cls) -> str:
        return "lwmq"

    def schema(self) -> str:
        return DEFAULT_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if "url" not in self.options:
            raise ValueError('the lwmq source needs .option("url", "bus://NAME")')
        return LwmqStreamReader(dict(self.options), schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        if "spool" not in self.options:
            raise ValueError('a batch read of lwmq needs .option("spool", DIR)')
        return SpoolReader(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> LwmqStreamWriter:
        if "url" not in self.options:
            raise ValueError('the lwmq sink needs .option("url", "ipc://NAME" or "bus://NAME")')
        return LwmqStreamWriter(dict(self.options), schema, overwrite)
