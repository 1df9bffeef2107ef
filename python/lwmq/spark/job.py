"""The demo pipeline as a standalone Spark job, for spark-submit (a cluster) or plain python (local):

    spark-submit --master spark://HOST:7077 "$(python -c 'import lwmq.spark.job as j; print(j.__file__)')" \\
        --bus bus://ticks --results ipc://results --checkpoint /shared/ckpt --spool /shared/spool

It runs until `--until-file` exists (the feed writes its totals there when it is done), then processes
what is left and stops; with `--available-now` it processes what the bus holds now and stops.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="lwmq market-data pipeline on Spark")
    p.add_argument("--bus", required=True)
    p.add_argument("--results", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--spool", required=True)
    p.add_argument("--master", help="for plain python runs (spark-submit sets it); default local[2]")
    p.add_argument("--until-file", help="stop once this file exists and everything before it is processed")
    p.add_argument("--available-now", action="store_true", help="Trigger.AvailableNow: what the bus holds now")
    p.add_argument("--trigger", default="1 second")
    args = p.parse_args(argv)

    from lwmq.spark import pipeline

    if "PYSPARK_GATEWAY_PORT" in os.environ:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.getOrCreate()  # spark-submit configured it
        spark.sparkContext.setLogLevel("ERROR")
        import lwmq.spark

        lwmq.spark.register(spark)
    else:
        spark = pipeline.local_session("lwmq-job", args.master or "local[2]")
    query = pipeline.start_query(spark, args.bus, args.results, args.checkpoint, args.spool, args.trigger,
                                 available_now=args.available_now)
    print(f"query {query.id} running", flush=True)
    if args.available_now:
        query.awaitTermination()
    else:
        while not (args.until_file and os.path.exists(args.until_file)):
            if not query.isActive:
                break
            time.sleep(0.2)
        if query.isActive:
            query.processAllAvailable()
            query.stop()
    error = query.exception()
    spark.stop()
    if error:
        print(f"query failed: {error}", file=sys.stderr)
        return 1
    print("query done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
