"""`lwmq demo` (and `make demo`): the data pipeline on an embedded local Spark.

    feed process ──ticks──► bus://…-ticks ──► Spark local[2]: per-symbol count, volume, VWAP over
    1-second windows ──► lwmq sink ──► ipc://…-results ──► consumer process: live table, summary

The consumer checks, at the end, that the count and volume per symbol over all windows equal what the
feed published, and reports end-to-end latency: for each micro-batch, from the publication of the
newest tick it includes to the arrival of its results.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from . import pipeline


def _table(rows: list[dict], batch_id: int, received: int) -> Table:
    t = Table(title=f"per symbol, latest 1-second window (micro-batch {batch_id}, {received} batches received)")
    for col in ("symbol", "window", "count", "volume", "VWAP", "total ticks", "total volume"):
        t.add_column(col, justify="left" if col in ("symbol", "window") else "right")
    totals = pipeline.totals_of(rows)
    latest: dict[str, dict] = {}
    for r in rows:
        if r["symbol"] not in latest or r["window"] > latest[r["symbol"]]["window"]:
            latest[r["symbol"]] = r
    for s in sorted(latest):
        r = latest[s]
        t.add_row(s, r["window"][11:19], f"{r['count']:,}", f"{r['volume']:,}", f"{r['vwap']:.4f}",
                  f"{totals[s]['count']:,}", f"{totals[s]['volume']:,}")
    return t


def consumer(results_url: str, state: str, done: Any, summary_path: str, ready: Any) -> None:
    """Receives the result batches, shows them live, and writes a summary when told the run is over."""
    from .results import ResultReceiver

    console = Console()
    latencies_ms: list[float] = []
    rows: list[dict] = []
    batches, last_id = 0, -1
    with ResultReceiver(results_url, state=state) as rr:
        ready.set()
        with Live(console=console, refresh_per_second=4, transient=False) as live:
            while True:
                try:
                    b = rr.get(timeout=0.25)
                except Exception:  # noqa: BLE001 - lwmq.Timeout: nothing new
                    if done.is_set():
                        break
                    continue
                batches += 1
                assert b.batch_id > last_id, "a batch was delivered twice"
                last_id, rows = b.batch_id, b.rows
                newest = max((r["newest_us"] for r in rows), default=None)
                if newest:
                    latencies_ms.append((b.received_ns / 1000 - newest) / 1000)
                live.update(_table(rows, b.batch_id, batches))
        summary = {"batches": batches, "duplicates_skipped": rr.duplicates, "totals": pipeline.totals_of(rows),
                   "latencies_ms": latencies_ms}
    with open(summary_path, "w") as f:
        json.dump(summary, f)


def _feed_main(url: str, rate: float, duration: float, totals: str, ready: Any, linger: Any) -> None:
    pipeline.feed(url, rate, duration, totals, ready=ready, linger=linger)


def run(rate: float = 2000.0, duration: float = 30.0, workdir: str | None = None, keep: bool = False) -> int:
    """Runs the demo; a work dir it made itself is removed at the end, failure included, unless `keep`."""
    work = workdir or tempfile.mkdtemp(prefix="lwmq-demo-")
    try:
        return _run(rate, duration, work)
    finally:
        if not keep and not workdir:
            shutil.rmtree(work, ignore_errors=True)


def _run(rate: float, duration: float, work: str) -> int:
    console = Console()
    ctx = multiprocessing.get_context("spawn")
    tag = f"lwmq-demo-{os.getpid()}"
    bus_url, results_url = f"bus://{tag}-ticks", f"ipc://{tag}-results"
    os.makedirs(work, exist_ok=True)
    paths = {k: os.path.join(work, k) for k in ("checkpoint", "spool", "totals.json", "summary.json", "receiver.json")}
    done, consumer_ready, feed_ready, linger = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Event()
    console.rule("[bold]lwmq demo: market data → bus:// → Spark Structured Streaming → lwmq sink → consumer")
    console.print(f"feed: {rate:,.0f} ticks/s for {duration:.0f} s on {bus_url}; results on {results_url}; work dir {work}")
    cons = ctx.Process(target=consumer, args=(results_url, paths["receiver.json"], done, paths["summary.json"], consumer_ready))
    cons.start()
    consumer_ready.wait(30)
    feeder = ctx.Process(target=_feed_main, args=(bus_url, rate, duration, paths["totals.json"], feed_ready, linger))
    feeder.start()
    feed_ready.wait(30)
    try:
        t0 = time.monotonic()
        with console.status("starting Spark (local[2]) …"):
            spark = pipeline.local_session("lwmq-demo", jvm_log=os.path.join(work, "spark.log"),
                                           scratch=os.path.join(work, "scratch"))
            query = pipeline.start_query(spark, bus_url, results_url, paths["checkpoint"], paths["spool"])
        console.print(f"Spark up in {time.monotonic() - t0:.1f} s; the query runs while the feed publishes")
        while feeder.is_alive() and not os.path.exists(paths["totals.json"]):
            if not query.isActive:
                raise RuntimeError(f"the query stopped: {query.exception()}")
            time.sleep(0.2)
        with console.status("feed finished; Spark processes what is left …"):
            query.processAllAvailable()
            time.sleep(1.5)  # the last trigger's results reach the consumer
            query.stop()
            spark.stop()
    finally:
        linger.set()
        done.set()
        feeder.join(30)
        cons.join(60)
        for p in (feeder, cons):
            if p.is_alive():
                p.kill()
    with open(paths["totals.json"]) as f:
        published = json.load(f)
    with open(paths["summary.json"]) as f:
        summary = json.load(f)
    lat = sorted(summary["latencies_ms"])
    ok = summary["totals"] == published["symbols"]
    console.print()
    t = Table(title="summary")
    t.add_column("")
    t.add_column("", justify="right")
    processed = sum(v["count"] for v in summary["totals"].values())
    t.add_row("ticks published", f"{published['ticks']:,}")
    t.add_row("ticks processed (sum of counts over all windows)", f"{processed:,}")
    t.add_row("result batches received (each once)", f"{summary['batches']:,}")
    t.add_row("re-sent batches skipped by the receiver", f"{summary['duplicates_skipped']:,}")
    if lat:
        t.add_row("end-to-end latency p50 (newest tick → its results)", f"{statistics.median(lat):,.0f} ms")
        t.add_row("end-to-end latency p99", f"{lat[min(len(lat) - 1, int(0.99 * len(lat)))]:,.0f} ms")
    t.add_row("count and volume per symbol equal what was published", "[green]yes[/]" if ok else "[red]NO[/]")
    console.print(t)
    if not ok:
        console.print(f"published {published['symbols']}\nprocessed {summary['totals']}")
    return 0 if ok else 1
