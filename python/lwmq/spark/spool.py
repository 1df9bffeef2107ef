"""The source's durable spool: every message the driver-side receiver takes off the bus is appended here
before Spark is given an offset that covers it, so a micro-batch can be re-read with identical data
after a restart (exactly-once with a checkpoint), and the receiver knows where to resume on the bus.

Layout of a spool directory (pure Python, no Spark needed):

    meta.json              {"version": 1, "url": ..., "bus_id": ...}: which bus it follows
    lock                   flock'ed by the one receiver that appends (a second one is refused)
    <base:020d>.log        records base, base+1, ...: header <QQQHHI> (seq, publisher, timestamp_ns,
                           topic length, frame count, payload length), topic, then per frame a u32
                           length and the bytes
    <base:020d>.idx        one little-endian u64 per record: where that record ends in the .log

A record is durable once its index entry is: data is written before index, both are fsync'ed before an
offset is handed out, and on opening, a torn tail (index entries without their data, a partial entry)
is cut. Offsets are record numbers counted from the spool's creation; `release(n)` deletes segments
whose records are all below n (Spark has committed them).
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

HEADER = struct.Struct("<QQQHHI")
FRAME = struct.Struct("<I")
SEGMENT_RECORDS = 65536
VERSION = 1


class SpoolError(RuntimeError):
    """The spool directory is unusable (locked by another receiver, wrong version, corrupt)."""


@dataclass(frozen=True)
class Record:
    seq: int
    publisher: int
    timestamp_ns: int
    topic: bytes
    frames: tuple[bytes, ...]


def encode(seq: int, publisher: int, timestamp_ns: int, topic: bytes, frames: list[bytes] | tuple[bytes, ...]) -> bytes:
    body = b"".join(FRAME.pack(len(f)) + bytes(f) for f in frames)
    return HEADER.pack(seq, publisher, timestamp_ns, len(topic), len(frames), len(body)) + topic + body


def decode(buf: bytes | memoryview, at: int = 0) -> tuple[Record, int]:
    seq, publisher, ts, topic_len, nframes, body_len = HEADER.unpack_from(buf, at)
    at += HEADER.size
    topic = bytes(buf[at:at + topic_len])
    at += topic_len
    end = at + body_len
    frames = []
    for _ in range(nframes):
        (n,) = FRAME.unpack_from(buf, at)
        at += FRAME.size
        frames.append(bytes(buf[at:at + n]))
        at += n
    if at != end:
        raise SpoolError(f"corrupt spool record (seq {seq})")
    return Record(seq, publisher, ts, topic, tuple(frames)), end


def _segments(path: str) -> list[int]:
    return sorted(int(name[:-4]) for name in os.listdir(path) if name.endswith(".idx") and name[:-4].isdigit())


def _name(path: str, base: int, ext: str) -> str:
    return os.path.join(path, f"{base:020d}.{ext}")


def _read_index(path: str, base: int) -> array.array:
    index = array.array("Q")
    with open(_name(path, base, "idx"), "rb") as f:
        data = f.read()
    index.frombytes(data[: len(data) // 8 * 8])
    return index


def read_range(path: str, start: int, end: int) -> Iterator[Record]:
    """Records start..end-1 (offsets), in order. Runs anywhere the spool directory is visible."""
    bases = _segments(path)
    for i, base in enumerate(bases):
        top = bases[i + 1] if i + 1 < len(bases) else None
        if top is not None and top <= start:
            continue
        if base >= end:
            break
        index = _read_index(path, base)
        lo, hi = max(start, base) - base, min(end, base + len(index)) - base
        if lo >= hi:
            continue
        first = index[lo - 1] if lo > 0 else 0
        with open(_name(path, base, "log"), "rb") as f:
            f.seek(first)
            data = memoryview(f.read(index[hi - 1] - first))
        at = 0
        for _ in range(lo, hi):
            record, at = decode(data, at)
            yield record
    # A range Spark asks for was made durable before its offset was handed out: it must all be here.


class Spool:
    """The appending side, owned by one receiver (the source's driver-side helper)."""

    def __init__(self, path: str, url: str) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = path
        self._lock = open(os.path.join(path, "lock"), "a+b")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise SpoolError(f"spool {path} is in use by another lwmq source (one query per spool)") from None
        self.meta = self._load_meta(url)
        self._log = self._idx = None
        self._base = 0
        self._records = 0  # in the open segment
        self._end = 0  # byte end of the open segment's log
        self.last_seq: int | None = None
        self._recover()

    def _load_meta(self, url: str) -> dict:
        meta_path = os.path.join(self.path, "meta.json")
        if os.path.exists(meta_path):
            with open(meta_path) as f:
                meta = json.load(f)
            if meta.get("version") != VERSION:
                raise SpoolError(f"spool {self.path} has format version {meta.get('version')}, not {VERSION}")
            if meta.get("url") != url:
                raise SpoolError(f"spool {self.path} follows {meta.get('url')}, not {url}: use another spool")
            return meta
        meta = {"version": VERSION, "url": url, "bus_id": None}
        self._write_meta(meta)
        return meta

    def _write_meta(self, meta: dict) -> None:
        tmp = os.path.join(self.path, "meta.json.tmp")
        with open(tmp, "w") as f:
            json.dump(meta, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.path, "meta.json"))
        _fsync_dir(self.path)

    def set_bus_id(self, bus_id: int) -> None:
        self.meta["bus_id"] = bus_id
        self._write_meta(self.meta)

    def _recover(self) -> None:
        """Opens the last segment, cutting a torn tail: index entries past the log's end, a partial entry."""
        bases = _segments(self.path)
        if not bases:
            self._open_segment(0)
            return
        base = bases[-1]
        index = _read_index(self.path, base)
        log_size = os.path.getsize(_name(self.path, base, "log")) if os.path.exists(_name(self.path, base, "log")) else 0
        keep = len(index)
        while keep and index[keep - 1] > log_size:
            keep -= 1
        end = index[keep - 1] if keep else 0
        with open(_name(self.path, base, "idx"), "r+b") as f:
            f.truncate(keep * 8)
        with open(_name(self.path, base, "log"), "a+b") as f:
            f.truncate(end)
        if keep:
            with open(_name(self.path, base, "log"), "rb") as f:
                f.seek(index[keep - 2] if keep > 1 else 0)
                self.last_seq = decode(f.read(end - (index[keep - 2] if keep > 1 else 0)))[0].seq
        elif len(bases) > 1:  # the last segment is empty: the previous one holds the last record
            for record in read_range(self.path, base - 1, base):
                self.last_seq = record.seq
        self._base, self._records, self._end = base, keep, end
        self._log = open(_name(self.path, base, "log"), "ab")
        self._idx = open(_name(self.path, base, "idx"), "ab")

    def _open_segment(self, base: int) -> None:
        if self._log:
            self.flush(sync=True)
            self._log.close()
            self._idx.close()
        self._base, self._records, self._end = base, 0, 0
        self._log = open(_name(self.path, base, "log"), "ab")
        self._idx = open(_name(self.path, base, "idx"), "ab")
        _fsync_dir(self.path)

    @property
    def count(self) -> int:
        """Offsets handed out so far are below this: records ever appended (durable after `flush`)."""
        return self._base + self._records

    def first(self) -> int:
        """The lowest offset still held."""
        bases = _segments(self.path)
        return bases[0] if bases else self.count

    def append(self, seq: int, publisher: int, timestamp_ns: int, topic: bytes, frames) -> None:
        if self._records == SEGMENT_RECORDS:
            self._open_segment(self._base + self._records)
        record = encode(seq, publisher, timestamp_ns, topic, frames)
        self._log.write(record)
        self._end += len(record)
        self._idx.write(struct.pack("<Q", self._end))
        self._records += 1
        self.last_seq = seq

    def flush(self, sync: bool = True) -> None:
        """Makes everything appended durable: data first, then the index that points at it."""
        self._log.flush()
        if sync:
            os.fsync(self._log.fileno())
        self._idx.flush()
        if sync:
            os.fsync(self._idx.fileno())

    def release(self, upto: int) -> int:
        """Deletes whole segments below offset `upto` (committed by Spark); returns how many."""
        bases = _segments(self.path)
        gone = 0
        for i, base in enumerate(bases[:-1]):  # never the open segment
            if bases[i + 1] <= upto:
                os.remove(_name(self.path, base, "log"))
                os.remove(_name(self.path, base, "idx"))
                gone += 1
        return gone

    def close(self) -> None:
        if self._log:
            self.flush(sync=True)
            self._log.close()
            self._idx.close()
            self._log = None
        self._lock.close()


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
