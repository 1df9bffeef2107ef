"""Renders a benchmark JSON (from `lwmq bench`) as the Markdown tables of docs/performance.md:
`python benchmarks/to_markdown.py benchmarks/results/bench-full.json`."""

from __future__ import annotations

import json
import sys

from lwmq.bench.report import targets


def size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n >= 1024 else f"{n} B"


def main(path: str) -> None:
    data = json.loads(open(path).read())
    tp = [r for r in data["results"] if r["kind"] == "throughput" and "median" in r]
    sizes = sorted({r["size"] for r in tp})
    names = list(dict.fromkeys(r["contender"] for r in tp))
    print("| contender | " + " | ".join(size(s) for s in sizes) + " |")
    print("| --- |" + " ---: |" * len(sizes))
    for name in names:
        cells = []
        for s in sizes:
            r = next((r for r in tp if r["contender"] == name and r["size"] == s), None)
            if r is None:
                cells.append("—")
            else:
                m = r["median"]
                cells.append(f"{m['messages_per_s']:,.0f}" + (f"<br>{m['gb_per_s']:.1f} GB/s" if s >= 65536 else ""))
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    print("| contender | size | p50 µs | p99 µs | p99.9 µs |")
    print("| --- | --- | ---: | ---: | ---: |")
    for r in data["results"]:
        if r["kind"] == "latency" and "median" in r:
            m = r["median"]
            print(f"| {r['contender']} | {size(r['size'])} | {m['p50_us']:.1f} | {m['p99_us']:.1f} | {m['p999_us']:.1f} |")
    print()
    pubsub = [r for r in data["results"] if r["kind"] == "pubsub" and "median" in r]
    if pubsub:
        print("| publish/subscribe, 64 B | publishers x subscribers | delivered messages/s |")
        print("| --- | --- | ---: |")
        for r in pubsub:
            print(f"| {r['contender']} | {'4 x 4' if '4x4' in r['contender'] else '1 x 1'} | {r['median']['messages_per_s']:,.0f} |")
        print()
    print("| target | measured | needed | met |")
    print("| --- | ---: | ---: | --- |")
    for t in targets(data):
        cmp = "≥" if t["higher_is_better"] else "≤"
        measured = "—" if t["ratio"] is None else f"{t['ratio']:.2f}" + (f" ({t['basis']})" if t["basis"] else "")
        print(f"| {t['target']} | {measured} | {cmp} {t['need']:.2f} | {'yes' if t['met'] else 'no' if t['met'] is False else 'n/a'} |")
    print()
    mc = data["memcpy_gb_per_s"]
    idle = data.get("idle_cpu_fraction") or {}
    print(f"memcpy on this machine: {', '.join(f'{k} {v:.1f} GB/s' for k, v in mc.items())}. "
          f"Idle channel: {', '.join(f'{k} {v:.2%} of a core' for k, v in idle.items())}. "
          f"{data['machine']['cpus']} CPUs, Python {data['machine']['python']}, lwmq {data['machine']['lwmq']} "
          f"({data['machine']['lwmq_build']} build), {data['mode']} run, median of {data['repetitions']}, {data['when']}.")


if __name__ == "__main__":
    main(sys.argv[1])
