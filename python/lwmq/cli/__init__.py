"""The ``lwmq`` command line: ``lwmq --help``."""

from __future__ import annotations

import argparse
import sys

from .. import __version__, build_profile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lwmq", description="lwmq: brokerless messaging for Python.")
    parser.add_argument("--version", action="version", version=f"lwmq {__version__} ({build_profile} build)")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo", help="the data pipeline: market-data feed → bus:// → Spark Structured Streaming → lwmq sink → consumer"
    )
    demo.add_argument("--rate", type=float, default=2000.0, help="ticks per second the feed publishes")
    demo.add_argument("--duration", type=float, default=30.0, help="seconds the feed publishes")
    demo.add_argument("--workdir", help="keep checkpoint, spool and summaries here (default: a temporary folder)")

    ping = sub.add_parser("ping", help="two peers exchange messages; prints messages/s and round-trip latency")
    ping.add_argument("--url", help="transport URI (default: the best available)")
    ping.add_argument("--messages", type=int, default=1_000_000, help="messages for the throughput run")
    ping.add_argument("--size", type=int, default=64, help="message size in bytes")
    ping.add_argument("--round-trips", type=int, default=20_000, help="round trips for the latency run")

    bench = sub.add_parser("bench", help="measure lwmq and its peers (pyzmq, iceoryx2, pipes, sockets) in one run")
    bench.add_argument("--quick", action="store_true", help="fewer messages, one repetition (under 2 minutes)")
    bench.add_argument("--repetitions", type=int, help="runs per case (default: 3, quick: 1)")
    bench.add_argument("--out", default="benchmarks/results", help="folder for the JSON and the plots")
    bench.add_argument("--only", action="append", help="only contenders whose name contains this (repeatable)")
    bench.add_argument("--scale", type=float, default=1.0, help="multiply message counts (a smoke run: 0.001)")

    sub.add_parser("transports", help="list the transports lwmq can use")

    send = sub.add_parser("send", help="send each line of standard input (or --message) as a message")
    send.add_argument("url")
    send.add_argument("--message", "-m", action="append", help="a message to send (repeatable)")
    send.add_argument("--timeout", type=float, default=5.0)

    recv = sub.add_parser("recv", help="listen on URL and print the messages of the first peer")
    recv.add_argument("url")
    recv.add_argument("--count", "-n", type=int, default=0, help="stop after N messages (0: until the peer leaves)")
    recv.add_argument("--timeout", type=float, default=None, help="seconds to wait for the peer")

    args = parser.parse_args(argv)
    if args.command == "demo":
        try:
            from ..spark.demo import run as run_pipeline
            import pyspark  # noqa: F401
        except ImportError:
            print('lwmq demo runs on Spark: pip install "lwmq[spark]" (make demo does it)', file=sys.stderr)
            return 2
        return run_pipeline(args.rate, args.duration, args.workdir)
    if args.command == "ping":
        from .demo import run

        return run(args.url, args.messages, args.size, args.round_trips)
    if args.command == "bench":
        from ..bench import main as bench_main

        return bench_main(args.quick, args.repetitions, args.out, args.only, args.scale)
    if args.command == "transports":
        from .tools import show_transports

        return show_transports()
    if args.command == "send":
        from .tools import send_lines

        return send_lines(args.url, args.message, args.timeout)
    if args.command == "recv":
        from .tools import print_messages

        return print_messages(args.url, args.count, args.timeout)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
