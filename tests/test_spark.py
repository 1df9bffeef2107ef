"""The Spark pipeline under real Spark (local[2], one session for the suite): exact totals, exactly-once
across a query restart and across a killed driver JVM, data loss reported by policy, read limits and
Trigger.AvailableNow, the sink in append mode to a bus, and the job on a standalone cluster through
spark-submit. `make test` installs pyspark (the `spark` extra); Java 17 is on the machine."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from itertools import count

import pytest

pytest.importorskip("pyspark")

import lwmq  # noqa: E402
from lwmq.spark import ResultReceiver, pipeline  # noqa: E402

pytestmark = pytest.mark.timeout(300)
_n = count()


@pytest.fixture(scope="session", autouse=True)
def spark_scratch(tmp_path_factory):
    """Every JVM this suite starts (the session's, killed drivers', a standalone cluster's) writes its own
    files (spark-*, blockmgr-*, native libraries, perf data) here, not in /tmp; removed at the end, so
    a JVM killed on purpose leaves nothing behind."""
    scratch = tmp_path_factory.mktemp("spark-scratch")
    saved = {k: os.environ.get(k) for k in ("SPARK_LOCAL_DIRS", "JAVA_TOOL_OPTIONS")}
    os.environ["SPARK_LOCAL_DIRS"] = str(scratch)
    os.environ["JAVA_TOOL_OPTIONS"] = f"-Djava.io.tmpdir={scratch} -XX:-UsePerfData"
    yield scratch
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="session")
def spark(spark_scratch):
    session = pipeline.local_session("lwmq-tests")
    yield session
    session.stop()


@pytest.fixture
def names(tmp_path):
    i = next(_n)
    tag = f"t-spark-{os.getpid()}-{i}"
    return {
        "bus": f"bus://{tag}-ticks", "results": f"ipc://{tag}-results", "checkpoint": str(tmp_path / "ckpt"),
        "spool": str(tmp_path / "spool"), "totals": str(tmp_path / "totals.json"), "state": str(tmp_path / "rr.json"),
    }


@pytest.fixture
def procs():
    """Owns child processes (feeds, jobs): killed, with their process groups, at teardown."""
    owned: list[subprocess.Popen] = []

    def start(args: list[str], **kw) -> subprocess.Popen:
        p = subprocess.Popen(args, start_new_session=True, **kw)
        owned.append(p)
        return p

    yield start
    for p in owned:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
        for f in (p.stdin, p.stdout):
            if f:
                f.close()


def start_feed(procs, names, rate: float, duration: float) -> subprocess.Popen:
    feed = procs([sys.executable, "-m", "lwmq.spark.pipeline", names["bus"], str(rate), str(duration), names["totals"]],
                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert feed.stdout.readline() == "ready\n"
    return feed


def published(names) -> dict:
    with open(names["totals"]) as f:
        return json.load(f)


def wait_file(path: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def drain(rr: ResultReceiver, seen: list, quiet: float = 2.0) -> None:
    """Takes delivered batches until none comes for `quiet` seconds; checks none is delivered twice."""
    while True:
        try:
            b = rr.get(timeout=quiet)
        except lwmq.Timeout:
            return
        assert not seen or b.batch_id > seen[-1].batch_id, "a batch was delivered twice"
        seen.append(b)


def wait_batches(rr: ResultReceiver, seen: list, rows_at_least: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not seen or sum(r["count"] for r in seen[-1].rows) < rows_at_least:
        assert time.monotonic() < deadline, "no result batch came"
        try:
            b = rr.get(timeout=1)
        except lwmq.Timeout:
            continue
        assert not seen or b.batch_id > seen[-1].batch_id, "a batch was delivered twice"
        seen.append(b)


def test_pipeline_totals_are_exact(spark, names, procs):
    with ResultReceiver(names["results"], state=names["state"]) as rr:
        start_feed(procs, names, rate=2000, duration=4)
        q = pipeline.start_query(spark, names["bus"], names["results"], names["checkpoint"], names["spool"], "500 milliseconds")
        wait_file(names["totals"])
        q.processAllAvailable()
        q.stop()
        seen: list = []
        drain(rr, seen)
    totals = published(names)
    assert totals["ticks"] == 8000
    assert pipeline.totals_of(seen[-1].rows) == totals["symbols"]
    assert all(r["vwap"] > 0 for r in seen[-1].rows)


def test_exactly_once_across_a_query_restart(spark, names, procs):
    with ResultReceiver(names["results"], state=names["state"]) as rr:
        start_feed(procs, names, rate=2000, duration=8)
        seen: list = []
        q = pipeline.start_query(spark, names["bus"], names["results"], names["checkpoint"], names["spool"], "500 milliseconds")
        wait_batches(rr, seen, rows_at_least=1)
        q.stop()  # mid-stream: the feed goes on publishing
        time.sleep(1)
        q = pipeline.start_query(spark, names["bus"], names["results"], names["checkpoint"], names["spool"], "500 milliseconds")
        wait_file(names["totals"])
        q.processAllAvailable()
        q.stop()
        drain(rr, seen)
    assert pipeline.totals_of(seen[-1].rows) == published(names)["symbols"]
    assert len({b.batch_id for b in seen}) == len(seen)


def test_exactly_once_when_the_driver_jvm_is_killed(names, procs, tmp_path):
    job = [sys.executable, "-m", "lwmq.spark.job", "--bus", names["bus"], "--results", names["results"],
           "--checkpoint", names["checkpoint"], "--spool", names["spool"], "--until-file", names["totals"],
           "--trigger", "500 milliseconds"]
    log = open(tmp_path / "job.log", "w")
    with ResultReceiver(names["results"], state=names["state"]) as rr:
        start_feed(procs, names, rate=2000, duration=12)
        first = procs(job, stdout=log, stderr=log)
        seen: list = []
        wait_batches(rr, seen, rows_at_least=1, timeout=150)
        os.killpg(first.pid, signal.SIGKILL)  # the Python driver, its JVM and the Python workers
        first.wait()
        second = procs(job, stdout=log, stderr=log)
        assert second.wait(timeout=240) == 0, (tmp_path / "job.log").read_text()[-3000:]
        drain(rr, seen)
    log.close()
    assert pipeline.totals_of(seen[-1].rows) == published(names)["symbols"]
    assert len({b.batch_id for b in seen}) == len(seen), "a batch was delivered twice"


def fails_then_counts(spark, names, error: str) -> dict:
    """Restarts the query after a loss: by default it fails with `error`; with failOnDataLoss=false it
    processes what is there. Returns the loss figures from the query's progress."""
    q = pipeline.start_query(spark, names["bus"], names["results"], names["checkpoint"], names["spool"], "500 milliseconds")
    with pytest.raises(Exception, match=error):
        q.awaitTermination(120)
    q = pipeline.start_query(spark, names["bus"], names["results"], names["checkpoint"], names["spool"], "500 milliseconds",
                             extra_source_options={"failOnDataLoss": "false"})
    q.processAllAvailable()
    progress = q.lastProgress
    q.stop()
    return json.loads(progress["sources"][0]["latestOffset"])


def test_loss_while_down_fails_the_query_or_is_counted(spark, names):
    def tick(i: int) -> bytes:
        return json.dumps({"symbol": "AAPL", "price": 1.0, "size": 1, "time": time.time()}).encode()

    with lwmq.Publisher(names["bus"], capacity=1024, max_message_size=256) as pub, \
            ResultReceiver(names["results"], state=names["state"]) as rr:
        seen: list = []
        q = pipeline.start_query(spark, names["bus"], names["results"], names["checkpoint"], names["spool"], "500 milliseconds")
        pub.publish_many([(b"t", tick(i)) for i in range(500)])
        wait_batches(rr, seen, rows_at_least=500)
        q.stop()
        # While the query is down, 3,000 more: the ring keeps the last 1,024, so 1,976 are gone.
        for _ in range(6):
            pub.publish_many([(b"t", tick(i)) for i in range(500)])
        lost = fails_then_counts(spark, names, "1976 messages before sequence 2476 fell out of the bus")
        drain(rr, seen)
    assert pipeline.totals_of(seen[-1].rows)["AAPL"]["count"] == 500 + 1024
    assert lost["lost"] == 1976


def test_available_now_with_max_records_per_trigger(spark, names):
    with lwmq.Publisher(names["bus"], **pipeline.FEED_BUS) as pub, ResultReceiver(names["results"]) as rr:
        pub.publish_many([(b"t", json.dumps({"symbol": "MSFT", "price": 2.0, "size": 3, "time": time.time()}).encode())] * 3000)
        q = pipeline.start_query(spark, names["bus"], names["results"], names["checkpoint"], names["spool"],
                                 extra_source_options={"maxRecordsPerTrigger": "1000"}, available_now=True)
        assert q.awaitTermination(180)  # AvailableNow ends by itself
        rows_per_batch = [p["numInputRows"] for p in q.recentProgress]
        seen: list = []
        drain(rr, seen, quiet=1.0)
    assert sum(rows_per_batch) == 3000 and max(rows_per_batch) <= 1000 and len([n for n in rows_per_batch if n]) >= 3
    assert pipeline.totals_of(seen[-1].rows)["MSFT"] == {"count": 3000, "volume": 9000}


def test_append_mode_to_a_bus_and_the_binary_schema(spark, names):
    results_bus = names["bus"] + "-out"
    with lwmq.Publisher(names["bus"]) as pub, ResultReceiver(results_bus, capacity=4096, max_message_size=1024) as rr:
        for i in range(100):
            pub.publish(f"k{i % 4}", [b"x" * i])
        df = (spark.readStream.format("lwmq").option("url", names["bus"]).option("spool", names["spool"])
              .option("startingOffsets", "earliest").option("topics", "k1,k2").load())
        q = (df.selectExpr("topic", "sequence", "length(payload) AS n").writeStream.format("lwmq")
             .option("url", results_bus).option("checkpointLocation", names["checkpoint"]).outputMode("append")
             .trigger(availableNow=True).start())
        assert q.awaitTermination(180)
        seen: list = []
        drain(rr, seen, quiet=1.0)
    rows = sorted((r for b in seen for r in b.rows), key=lambda r: r["sequence"])
    assert [(r["topic"], r["sequence"], r["n"]) for r in rows] == [(f"k{i % 4}", i, i) for i in range(100) if i % 4 in (1, 2)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_job_runs_on_a_standalone_cluster_through_spark_submit(names, procs, tmp_path):
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    env = {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOG_DIR": str(tmp_path), "SPARK_WORKER_DIR": str(tmp_path / "work")}
    port = _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    log = open(tmp_path / "cluster.log", "w")
    spark_class = os.path.join(home, "bin", "spark-class")
    procs([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
           "--webui-port", str(_free_port())], env=env, stdout=log, stderr=log)
    procs([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2",
           "--memory", "1g", "--webui-port", str(_free_port()), master_url], env=env, stdout=log, stderr=log)
    with lwmq.Publisher(names["bus"], **pipeline.FEED_BUS) as pub, \
            ResultReceiver(names["results"], state=names["state"]) as rr:
        ticks = [(b"t", json.dumps({"symbol": s, "price": 10.0, "size": 2, "time": time.time()}).encode())
                 for s in pipeline.SYMBOLS for _ in range(200)]
        pub.publish_many(ticks)
        job = procs([os.path.join(home, "bin", "spark-submit"), "--master", master_url,
                     "--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.ui.enabled=false",
                     "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.sql.session.timeZone=UTC",
                     "--conf", "spark.executor.memory=512m",
                     pipeline.__file__.replace("pipeline.py", "job.py"), "--bus", names["bus"], "--results", names["results"],
                     "--checkpoint", names["checkpoint"], "--spool", names["spool"], "--available-now"],
                    env=env, stdout=log, stderr=log)
        assert job.wait(timeout=240) == 0, (tmp_path / "cluster.log").read_text()[-4000:]
        seen: list = []
        drain(rr, seen, quiet=1.0)
    log.close()
    assert "Registered app" in (tmp_path / "cluster.log").read_text() or "Launching executor" in (tmp_path / "cluster.log").read_text()
    assert pipeline.totals_of(seen[-1].rows) == {s: {"count": 200, "volume": 400} for s in pipeline.SYMBOLS}


def test_the_demo_runs_and_checks_its_totals(tmp_path, procs):
    demo = procs([sys.executable, "-m", "lwmq", "demo", "--rate", "500", "--duration", "3", "--workdir", str(tmp_path)],
                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, _ = demo.communicate(timeout=240)  # on a timeout `procs` kills the demo's whole process group
    assert demo.returncode == 0, output[-6000:]
    assert "ticks published" in output and "1,500" in output
    assert "equal what was published" in output and "yes" in output.split("equal what was published")[1][:40]
    assert "WARN" not in output  # Spark's own log went to the work dir
    assert (tmp_path / "spark.log").exists()
    assert (tmp_path / "scratch").is_dir(), "the demo's Spark kept its own files in the work dir"


def test_the_demo_leaves_nothing_in_tmp_without_a_workdir(tmp_path, procs):
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # where the demo makes its own work dir
    demo = procs([sys.executable, "-m", "lwmq", "demo", "--rate", "200", "--duration", "2"],
                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    output, _ = demo.communicate(timeout=240)
    assert demo.returncode == 0, output[-6000:]
    assert list(tmp_path.iterdir()) == []


def test_arrow_and_json_payloads_decode_into_the_given_columns():
    import pyarrow as pa
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType, TimestampType

    from lwmq.spark.source import records_to_batch
    from lwmq.spark.spool import Record

    table = pa.table({"symbol": ["A", "B"], "price": [1.5, 2.5]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    arrow_record = Record(seq=7, publisher=3, timestamp_ns=1_700_000_000_123_456_000, topic=b"md", frames=(sink.getvalue().to_pybytes(),))
    schema = StructType([StructField("topic", StringType()), StructField("sequence", LongType()),
                         StructField("timestamp", TimestampType()), StructField("symbol", StringType()),
                         StructField("price", DoubleType())])
    batch = records_to_batch([arrow_record], schema, "arrow")
    assert batch.to_pylist() == [
        {"topic": "md", "sequence": 7, "timestamp": batch.column(2)[0].as_py(), "symbol": "A", "price": 1.5},
        {"topic": "md", "sequence": 7, "timestamp": batch.column(2)[0].as_py(), "symbol": "B", "price": 2.5},
    ]
    assert str(batch.schema.field("timestamp").type) == "timestamp[us, tz=UTC]"
    assert batch.column(2)[0].value == 1_700_000_000_123_456
    json_record = Record(seq=8, publisher=3, timestamp_ns=0, topic=b"md", frames=(b'{"symbol": "C", "price": 3.0, "extra": 1}',))
    assert records_to_batch([json_record], schema, "json").to_pylist()[0] == {
        "topic": "md", "sequence": 8, "timestamp": records_to_batch([json_record], schema, "json").column(2)[0].as_py(),
        "symbol": "C", "price": 3.0}
    with pytest.raises(ValueError, match="payloadFormat"):
        records_to_batch([json_record], schema, "xml")


def test_a_bus_recreated_while_the_query_was_down_is_a_reported_loss(spark, names):
    def ticks(n: int) -> list:
        return [(b"t", json.dumps({"symbol": "GOOG", "price": 1.0, "size": 1, "time": time.time()}).encode())] * n

    with ResultReceiver(names["results"], state=names["state"]) as rr:
        seen: list = []
        with lwmq.Publisher(names["bus"]) as pub:
            q = pipeline.start_query(spark, names["bus"], names["results"], names["checkpoint"], names["spool"], "500 milliseconds")
            pub.publish_many(ticks(100))
            wait_batches(rr, seen, rows_at_least=100)
            q.stop()
        # Every member left: that bus is gone. A new one of the same name starts again from sequence 0.
        with lwmq.Publisher(names["bus"]) as pub:
            pub.publish_many(ticks(30))
            lost = fails_then_counts(spark, names, "was recreated while the source was down")
        drain(rr, seen)
    assert pipeline.totals_of(seen[-1].rows)["GOOG"]["count"] == 130
    assert lost["lost_unknown"] == 1
