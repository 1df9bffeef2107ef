"""lwmq for Apache Spark (PySpark's Python Data Source API, pyspark 4.2+: `pip install "lwmq[spark]"`).

    import lwmq.spark
    lwmq.spark.register(spark)                       # the format "lwmq"
    ticks = spark.readStream.format("lwmq").option("url", "bus://ticks").load()
    query = result.writeStream.format("lwmq").option("url", "ipc://results") \\
        .option("checkpointLocation", "/shared/ckpt").start()

    with lwmq.spark.ResultReceiver("ipc://results", state="results.json") as rr:
        for batch in rr: ...                         # each micro-batch exactly once

`import lwmq` never imports pyspark; `lwmq.spark` imports it when the data source is first used, so
`ResultReceiver` (the receiving end, in a process that needs no Spark) works without it. See docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from .results import ResultBatch, ResultReceiver, ResultsLost


def __getattr__(name: str) -> Any:
    if name == "LwmqDataSource":
        from .source import LwmqDataSource

        return LwmqDataSource
    raise AttributeError(name)


def register(spark: Any) -> None:
    """Registers the data source `lwmq` with a SparkSession."""
    from .source import LwmqDataSource

    spark.dataSource.register(LwmqDataSource)


__all__ = ["register", "LwmqDataSource", "ResultReceiver", "ResultBatch", "ResultsLost"]
