"""The demo pipeline's pieces, shared by `lwmq demo`, the tests and the spark-submit job (job.py):
a local SparkSession set up quietly, the market-data feed, and the streaming query.

    ticks (JSON: symbol, price, size, time) on bus:// ──► lwmq source (spool) ──► per-symbol count,
    volume and VWAP over 1-second windows ──► lwmq sink ──► ipc:// ──► ResultReceiver

pyspark is imported inside the functions that need it: the feed runs in a process without Spark.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any

import lwmq

SYMBOLS = ("AAPL", "MSFT", "NVDA", "AMZN", "GOOG")
TICK_SCHEMA = "topic string, sequence long, timestamp timestamp, symbol string, price double, size long, time double"
# Enough slots to hold a default demo run whole, so a query that starts late still reads every tick.
FEED_BUS = {"capacity": 1 << 17, "max_message_size": 256}



def quiet_spark_env() -> None:
    """Environment for a local Spark driven from this Python: loopback only, and workers running this
    interpreter (so they import this lwmq). The JVM's own output is handled by `local_session`."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def local_session(app: str = "lwmq", master: str = "local[2]", jvm_log: str | None = None,
                  scratch: str | None = None) -> Any:
    """A SparkSession for this machine with the settings shared/notes/SPARK.md found to matter. With
    `jvm_log`, the JVM's own standard error (start-up warnings, its log) goes to that file instead of
    the terminal: the JVM inherits file descriptor 2 when it starts, so it is pointed there meanwhile.
    With `scratch`, every file the JVM and Spark write for themselves (block manager and shuffle
    directories, extracted native libraries, JVM performance data) goes under that folder instead of
    /tmp, so whoever owns the folder removes them all, even after a JVM that was killed."""
    quiet_spark_env()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if scratch:
        os.makedirs(scratch, exist_ok=True)
        builder = builder.config("spark.local.dir", scratch).config(
            "spark.driver.extraJavaOptions", f"-Djava.io.tmpdir={scratch} -XX:-UsePerfData")

    saved = None
    if jvm_log:
        saved = os.dup(2)
        log_fd = os.open(jvm_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log_fd, 2)
        os.close(log_fd)
    try:
        spark = (
            builder.master(master).appName(app)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.memory", "1g")
            .getOrCreate()
        )
    finally:
        if saved is not None:
            os.dup2(saved, 2)
            os.close(saved)
    spark.sparkContext.setLogLevel("ERROR")
    from . import register

    register(spark)
    return spark


def feed(url: str, rate: float, duration: float, totals_path: str | None = None, seed: int = 7,
         ready: Any = None, linger: Any = None) -> dict:
    """Publishes ticks on `url` at `rate` per second for `duration` seconds; returns (and writes to
    `totals_path`) what it published: ticks, and count and volume per symbol. With `linger` (an Event),
    stays a member of the bus until it is set, so the ticks outlive the feed until they are read."""
    rng = random.Random(seed)
    prices = {s: 100.0 + 50 * i for i, s in enumerate(SYMBOLS)}
    totals = {s: {"count": 0, "volume": 0} for s in SYMBOLS}
    published = 0
    with lwmq.Publisher(url, **FEED_BUS) as pub:
        if ready is not None:
            ready.set()
        start = time.monotonic()
        batch = max(1, int(rate / 100))  # 100 bursts a second
        total = int(rate * duration)
        while published < total:
            elapsed = time.monotonic() - start
            due = min(total, int(elapsed * rate))
            while published < due:
                items = []
                for _ in range(min(batch, due - published)):
                    s = SYMBOLS[rng.randrange(len(SYMBOLS))]
                    prices[s] = max(1.0, prices[s] * (1 + rng.gauss(0, 0.0005)))
                    size = rng.randrange(1, 500)
                    items.append((s, json.dumps({"symbol": s, "price": round(prices[s], 4), "size": size, "time": time.time()}).encode()))
                    totals[s]["count"] += 1
                    totals[s]["volume"] += size
                pub.publish_many(items, timeout=10)
                published += len(items)
            time.sleep(0.005)
        result = {"ticks": published, "symbols": totals}
        if totals_path:
            tmp = totals_path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(result, f)
            os.replace(tmp, totals_path)
        if linger is not None:  # the bus, and the ticks it holds, live while a member does
            linger.wait(3600)
        return result


def start_query(spark: Any, bus_url: str, results_url: str, checkpoint: str, spool: str,
                trigger: str = "1 second", extra_source_options: dict[str, str] | None = None,
                available_now: bool = False) -> Any:
    """The streaming query: per-symbol count, volume and VWAP over 1-second windows, written to the
    lwmq sink in complete mode (each micro-batch carries the whole table)."""
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("lwmq").option("url", bus_url).option("spool", spool)
        .option("payloadFormat", "json").option("startingOffsets", "earliest").schema(TICK_SCHEMA)
    )
    for k, v in (extra_source_options or {}).items():
        reader = reader.option(k, v)
    ticks = reader.load().withColumn("event_time", F.col("time").cast("timestamp"))
    table = ticks.groupBy(F.window("event_time", "1 second"), "symbol").agg(
        F.count("*").alias("count"),
        F.sum("size").alias("volume"),
        (F.sum(F.col("price") * F.col("size")) / F.sum("size")).alias("vwap"),
        F.max("timestamp").alias("newest"),
    ).select(
        F.col("window.start").alias("window"), "symbol", "count", "volume", "vwap",
        (F.unix_micros("newest")).alias("newest_us"),
    )
    writer = (
        table.writeStream.format("lwmq").option("url", results_url).outputMode("complete")
        .option("checkpointLocation", checkpoint)
    )
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=trigger)
    return writer.start()


def totals_of(rows: list[dict]) -> dict:
    """Count and volume per symbol over every window of a complete-mode result table."""
    out = {s: {"count": 0, "volume": 0} for s in SYMBOLS}
    for r in rows:
        t = out.setdefault(r["symbol"], {"count": 0, "volume": 0})
        t["count"] += r["count"]
        t["volume"] += r["volume"]
    return out


def _feed_main(argv: list[str]) -> None:
    """`python -m lwmq.spark.pipeline URL RATE DURATION TOTALS`: a feed process that stays a member of
    the bus until its standard input closes (tests and scripts own it that way)."""
    import threading

    url, rate, duration, totals = argv[0], float(argv[1]), float(argv[2]), argv[3]
    ready, linger = threading.Event(), threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), linger.set()), daemon=True).start()
    threading.Thread(target=lambda: (ready.wait(), print("ready", flush=True)), daemon=True).start()
    feed(url, rate, duration, totals, ready=ready, linger=linger)


if __name__ == "__main__":
    _feed_main(sys.argv[1:])
