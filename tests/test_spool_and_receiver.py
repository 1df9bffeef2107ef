"""The Spark connector's parts that need no Spark: the source's durable spool and the sink's
exactly-once receiver (tests/test_spark.py runs them under real Spark queries)."""

from __future__ import annotations

import json
import os
import sys

import pytest

import lwmq
import lwmq.spark
from lwmq.spark.results import ResultReceiver
from lwmq.spark.spool import Spool, SpoolError, read_range


def fill(spool: Spool, start: int, n: int) -> None:
    for seq in range(start, start + n):
        spool.append(seq, 7, 1000 + seq, b"t%d" % (seq % 3), [b"head", seq.to_bytes(4, "little") * (seq % 5)])


def test_spool_reads_back_ranges_across_segments(tmp_path, monkeypatch):
    monkeypatch.setattr("lwmq.spark.spool.SEGMENT_RECORDS", 100)
    spool = Spool(str(tmp_path), "bus://x")
    fill(spool, 10, 450)
    spool.flush()
    assert spool.count == 450 and spool.last_seq == 459
    got = list(read_range(str(tmp_path), 95, 305))
    assert [r.seq for r in got] == list(range(105, 315))
    assert got[0].frames == (b"head", (105).to_bytes(4, "little") * 0) and got[0].topic == b"t0"
    assert spool.release(300) == 3  # segments 0-99, 100-199, 200-299
    assert [r.seq for r in read_range(str(tmp_path), 300, 302)] == [310, 311]
    spool.close()


def test_a_torn_tail_is_cut_and_the_spool_resumes_after_its_last_whole_record(tmp_path):
    spool = Spool(str(tmp_path), "bus://x")
    fill(spool, 0, 20)
    spool.flush()
    spool.close()
    log, idx = tmp_path / f"{0:020d}.log", tmp_path / f"{0:020d}.idx"
    # A crash mid-append: the last record's data half written, and an index entry beyond the data.
    with open(log, "r+b") as f:
        f.truncate(os.path.getsize(log) - 5)
    with open(idx, "ab") as f:
        f.write(b"\xff\xff\xff")
    spool = Spool(str(tmp_path), "bus://x")
    assert spool.count == 19 and spool.last_seq == 18
    fill(spool, 19, 2)
    spool.flush()
    assert [r.seq for r in read_range(str(tmp_path), 0, spool.count)] == list(range(21))
    spool.close()


def test_one_receiver_per_spool_and_one_bus_per_spool(tmp_path):
    spool = Spool(str(tmp_path), "bus://x")
    with pytest.raises(SpoolError, match="in use"):
        Spool(str(tmp_path), "bus://x")
    spool.close()
    with pytest.raises(SpoolError, match="follows bus://x"):
        Spool(str(tmp_path), "bus://y")


def send(ch, header: dict, *frames: bytes) -> None:
    ch.send([json.dumps(header).encode(), *frames])


def reply(ch) -> dict:
    return json.loads(ch.recv(timeout=5)[0].tobytes())


def test_the_receiver_delivers_each_batch_once_with_the_winning_attempts_rows(tmp_path):
    url = f"ipc://test-results-{os.getpid()}"
    state = str(tmp_path / "state.json")
    with ResultReceiver(url, state=state) as rr:
        with lwmq.connect(url, timeout=5) as task1, lwmq.connect(url, timeout=5) as task2, lwmq.connect(url, timeout=5) as driver:
            send(task1, {"k": "rows", "sink": "q", "task": 1}, b'{"a": 1}')
            send(task1, {"k": "rows", "sink": "q", "task": 1}, b'{"a": 2}')
            send(task2, {"k": "rows", "sink": "q", "task": 2}, b'{"a": 99}')  # a failed attempt
            send(driver, {"k": "commit", "sink": "q", "batch": 0, "mode": "append", "parts": [[1, 2]]})
            assert reply(driver) == {"ack": 0}
            b = rr.get(timeout=5)
            assert (b.batch_id, b.mode, b.rows) == (0, "append", [{"a": 1}, {"a": 2}])
            # Spark re-runs batch 0 after a restart: new attempts, same batch id: not delivered again.
            send(task2, {"k": "rows", "sink": "q", "task": 3}, b'{"a": 1}')
            send(driver, {"k": "commit", "sink": "q", "batch": 0, "mode": "append", "parts": [[3, 1]]})
            assert reply(driver) == {"ack": 0, "duplicate": True}
            send(driver, {"k": "commit", "sink": "q", "batch": 1, "mode": "append", "parts": []})
            assert reply(driver) == {"ack": 1}
            assert rr.get(timeout=5).batch_id == 1
            with pytest.raises(lwmq.Timeout):
                rr.get(timeout=0.2)
        assert (rr.delivered, rr.duplicates) == (2, 1)
    # A restarted receiver remembers what it delivered.
    with ResultReceiver(url, state=state) as rr, lwmq.connect(url, timeout=5) as driver:
        assert rr.last_batch("q") == 1
        send(driver, {"k": "commit", "sink": "q", "batch": 1, "mode": "append", "parts": []})
        assert reply(driver) == {"ack": 1, "duplicate": True}


def test_a_commit_whose_rows_never_came_is_refused(tmp_path):
    url = f"ipc://test-results-{os.getpid()}-missing"
    with ResultReceiver(url, commit_wait=0.2) as rr, lwmq.connect(url, timeout=5) as driver:
        send(driver, {"k": "commit", "sink": "q", "batch": 0, "parts": [[5, 3]]})
        assert "rows missing" in reply(driver)["error"]
        assert rr.delivered == 0


def test_a_batch_older_than_the_last_delivered_is_refused_not_dropped(tmp_path):
    url = f"ipc://test-results-stale-{os.getpid()}"
    with ResultReceiver(url, state=str(tmp_path / "state.json")) as rr, lwmq.connect(url, timeout=5) as driver:
        for batch in (0, 1, 2):
            send(driver, {"k": "commit", "sink": "q", "batch": batch, "mode": "append", "parts": []})
            assert reply(driver) == {"ack": batch}
        # A new query (new checkpoint, batch ids from 0 again) under the old sink id: refused, loudly.
        send(driver, {"k": "commit", "sink": "q", "batch": 0, "mode": "append", "parts": []})
        answer = reply(driver)
        assert "older than batch 2" in answer["error"] and "sinkId" in answer["error"]
        # The same batch id under another sink id is that sink's own.
        send(driver, {"k": "commit", "sink": "other", "batch": 0, "mode": "append", "parts": []})
        assert reply(driver) == {"ack": 0}
        assert [rr.get(timeout=5).batch_id for _ in range(4)] == [0, 1, 2, 0]
        assert rr.duplicates == 0


def test_over_a_bus_an_undeliverable_batch_is_raised_to_the_application():
    url = f"bus://test-results-bus-{os.getpid()}"
    with ResultReceiver(url, commit_wait=0.2) as rr, lwmq.Publisher(url) as pub:
        def control(header: dict) -> None:
            pub.publish(b"lwmq.spark", [json.dumps(header).encode()], timeout=5)

        control({"k": "commit", "sink": "q", "batch": 0, "mode": "append", "parts": []})
        assert rr.get(timeout=5).batch_id == 0
        control({"k": "commit", "sink": "q", "batch": 1, "mode": "append", "parts": [[7, 3]]})  # rows never sent
        with pytest.raises(lwmq.spark.ResultsLost, match="rows missing"):
            rr.get(timeout=5)
        with pytest.raises(lwmq.spark.ResultsLost):  # and on every later call
            next(iter(rr))


def test_importing_lwmq_does_not_import_pyspark():
    import subprocess

    code = "import sys, lwmq, lwmq.spark; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
