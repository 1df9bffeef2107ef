"""Tables, target ratios and plots from one run's JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def _fmt_size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n >= 1024 else f"{n} B"


def _median(data: dict, contender: str, kind: str, size: int, key: str) -> float | None:
    for r in data["results"]:
        if r["contender"] == contender and r["kind"] == kind and r["size"] == size and "median" in r:
            return r["median"].get(key)
    return None


def _best_peer(data: dict, size: int, exclude_prefix: str = "lwmq") -> tuple[str, float] | None:
    best = None
    for r in data["results"]:
        if r["kind"] == "throughput" and r["size"] == size and "median" in r and not r["contender"].startswith(exclude_prefix):
            v = r["median"]["messages_per_s"]
            if best is None or v > best[1]:
                best = (r["contender"], v)
    return best


def targets(data: dict) -> list[dict]:
    """Every target of the benchmark issue, as a ratio measured in this run (None: not measurable)."""
    rows = []

    def add(name: str, ratio: float | None, need: float, higher_is_better: bool = True, basis: str = "") -> None:
        ok = None if ratio is None else (ratio >= need if higher_is_better else ratio <= need)
        rows.append({"target": name, "ratio": ratio, "need": need, "higher_is_better": higher_is_better, "met": ok, "basis": basis})

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a and b else None

    tp = lambda c, s: _median(data, c, "throughput", s, "messages_per_s")  # noqa: E731
    for size in (16, 256):
        add(f"{size} B send vs pyzmq ipc", ratio(tp("lwmq ipc send", size), tp("pyzmq PUSH/PULL ipc", size)), 3.0)
        add(f"{size} B send_many vs pyzmq ipc", ratio(tp("lwmq ipc send_many", size), tp("pyzmq PUSH/PULL ipc", size)), 10.0)
    for size, need in ((4096, 2.0), (65536, 1.2), (1 << 20, 1.2)):
        best = _best_peer(data, size)
        add(
            f"{_fmt_size(size)} send vs best peer",
            ratio(tp("lwmq ipc send", size), best[1] if best else None),
            need,
            basis=best[0] if best else "",
        )
    add(
        "loan/ship cost 4 KiB → 1 MiB (time per message, ratio)",
        ratio(tp("lwmq ipc loan/ship", 4096), tp("lwmq ipc loan/ship", 1 << 20)),
        2.0,
        higher_is_better=False,
    )
    lat = lambda c, s, k="p50_us": _median(data, c, "latency", s, k)  # noqa: E731
    add("RTT p50 16 B vs pyzmq PAIR ipc", ratio(lat("lwmq ipc", 16), lat("pyzmq PAIR ipc", 16)), 0.2, False)
    add("RTT p50 16 B vs SEQPACKET", ratio(lat("lwmq ipc", 16), lat("AF_UNIX SOCK_SEQPACKET", 16)), 0.5, False)
    add("RTT p50 16 B busy_poll vs iceoryx2 busy-poll", ratio(lat("lwmq ipc busy_poll", 16), lat("iceoryx2 busy-poll", 16)), 1 / 3, False)
    add("RTT p99 / own p50, 16 B, default", ratio(lat("lwmq ipc", 16, "p99_us"), lat("lwmq ipc", 16)), 10.0, False)
    idle = data.get("idle_cpu_fraction")
    add("idle channel: CPU of the busier side (fraction of a core)", max(idle.values()) if idle else None, 0.01, False)
    ps = lambda c: _median(data, c, "pubsub", 64, "messages_per_s")  # noqa: E731
    for layout, peer in (("", "pyzmq PUB/SUB ipc"), ("4x4 ", "pyzmq PUB/SUB ipc 4x4")):
        best = max(
            ((r["contender"], r["median"]["messages_per_s"]) for r in data["results"]
             if r["kind"] == "pubsub" and "median" in r and r["contender"].startswith(f"lwmq bus {layout}")
             and (layout or not r["contender"].startswith("lwmq bus 4x4"))),
            key=lambda x: x[1], default=None,
        )
        add(f"bus {layout or '1x1 '}64 B delivered vs {peer}", ratio(best[1] if best else None, ps(peer)), 5.0,
            basis=best[0].removeprefix("lwmq bus ") if best else "")
    add("bus RTT p50 64 B vs pyzmq PUB/SUB ipc", ratio(lat("lwmq bus", 64), lat("pyzmq PUB/SUB ipc", 64)), 0.2, False)
    return rows


def print_report(data: dict, console: Console | None = None) -> None:
    console = console or Console()
    sizes = sorted({r["size"] for r in data["results"] if r["kind"] == "throughput"})
    t = Table(title=f"Throughput, messages/s (median of {data['repetitions']}; GB/s below for ≥ 64 KiB)")
    t.add_column("contender")
    for s in sizes:
        t.add_column(_fmt_size(s), justify="right")
    names = list(dict.fromkeys(r["contender"] for r in data["results"] if r["kind"] == "throughput"))
    for name in names:
        cells = []
        for s in sizes:
            m = _median(data, name, "throughput", s, "messages_per_s")
            gb = _median(data, name, "throughput", s, "gb_per_s")
            err = next((r["errors"] for r in data["results"] if r["contender"] == name and r["size"] == s and r["errors"]), None)
            if m is None:
                cells.append("[red]failed[/]" if err else "—")
            else:
                cells.append(f"{m:,.0f}" + (f"\n{gb:.2f} GB/s" if s >= 65536 else ""))
        t.add_row(name, *cells)
    console.print(t)
    lt = Table(title="Round-trip latency, µs (median of runs)")
    for col in ("contender", "size", "p50", "p99", "p99.9"):
        lt.add_column(col, justify="right" if col != "contender" else "left")
    for r in data["results"]:
        if r["kind"] == "latency":
            if "median" in r:
                m = r["median"]
                lt.add_row(r["contender"], _fmt_size(r["size"]), f"{m['p50_us']:.1f}", f"{m['p99_us']:.1f}", f"{m['p999_us']:.1f}")
            else:
                lt.add_row(r["contender"], _fmt_size(r["size"]), "[red]failed[/]", "", "")
    console.print(lt)
    pubsub = [r for r in data["results"] if r["kind"] == "pubsub"]
    if pubsub:
        pt = Table(title="Publish/subscribe, 64 B: messages delivered per second, all subscribers together")
        for col in ("contender", "publishers x subscribers", "messages/s"):
            pt.add_column(col, justify="left" if col == "contender" else "right")
        for r in pubsub:
            layout = "4 x 4" if "4x4" in r["contender"] else "1 x 1"
            m = r.get("median", {}).get("messages_per_s")
            pt.add_row(r["contender"], layout, f"{m:,.0f}" if m else "[red]failed[/]")
        console.print(pt)
    tt = Table(title="Targets (ratios within this run)")
    for col in ("target", "measured", "needed", "met"):
        tt.add_column(col)
    for row in targets(data):
        cmp = "≥" if row["higher_is_better"] else "≤"
        measured = "—" if row["ratio"] is None else f"{row['ratio']:.2f}" + (f" ({row['basis']})" if row["basis"] else "")
        met = {True: "[green]yes[/]", False: "[red]no[/]", None: "n/a"}[row["met"]]
        tt.add_row(row["target"], measured, f"{cmp} {row['need']:.2f}", met)
    console.print(tt)
    idle = data.get("idle_cpu_fraction")
    if idle:
        console.print("idle channel, both sides blocked in recv: " + ", ".join(f"{k} {v:.2%} of a core" for k, v in idle.items()))
    mc = data["memcpy_gb_per_s"]
    console.print("memcpy reference: " + ", ".join(f"{k}: {v:.1f} GB/s" for k, v in mc.items()))
    for name, why in data.get("skipped", {}).items():
        console.print(f"[yellow]not measured[/]: {name}: {why}")
    for r in data["results"]:
        for e in r["errors"]:
            console.print(f"[red]error[/]: {r['contender']} {_fmt_size(r['size'])}: {e}")


def plot(data: dict, out_dir: Path, prefix: str = "") -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    tp = [r for r in data["results"] if r["kind"] == "throughput" and "median" in r]
    names = list(dict.fromkeys(r["contender"] for r in tp))
    for key, label, fname in (
        ("messages_per_s", "messages/s", "throughput-messages.png"),
        ("gb_per_s", "GB/s", "throughput-bandwidth.png"),
    ):
        fig, ax = plt.subplots(figsize=(8, 5))
        for name in names:
            pts = sorted((r["size"], r["median"][key]) for r in tp if r["contender"] == name)
            style = "-o" if name.startswith("lwmq") else "--s"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=name)
        if key == "gb_per_s":
            for k, v in data["memcpy_gb_per_s"].items():
                ax.axhline(v, color="grey", linestyle=":", linewidth=1)
                ax.text(16, v, f" memcpy {k}", va="bottom", fontsize=8, color="grey")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(label)
        ax.set_title(f"Throughput, two Python processes ({data['mode']} run, median of {data['repetitions']})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / f"{prefix}{fname}"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    pubsub = [r for r in data["results"] if r["kind"] == "pubsub" and "median" in r]
    if pubsub:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        names = [r["contender"] for r in pubsub]
        values = [r["median"]["messages_per_s"] for r in pubsub]
        colors = ["tab:blue" if n.startswith("lwmq") else "tab:grey" for n in names]
        ax.barh(range(len(names)), values, color=colors)
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("messages delivered per second (all subscribers)")
        ax.set_title(f"Publish/subscribe, 64 B ({data['mode']} run, median of {data['repetitions']})")
        ax.grid(True, axis="x", alpha=0.3)
        fig.tight_layout()
        path = out_dir / f"{prefix}bus-throughput.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    lat = [r for r in data["results"] if r["kind"] == "latency" and "median" in r]
    if lat:
        lat_sizes = sorted({r["size"] for r in lat})
        fig, axes = plt.subplots(1, len(lat_sizes), figsize=(5.5 * len(lat_sizes), 5), sharey=True, squeeze=False)
        axes = axes[0]
        for ax, size in zip(axes, lat_sizes):
            rows = [r for r in lat if r["size"] == size]
            labels = [r["contender"] for r in rows]
            for i, (k, name) in enumerate((("p50_us", "p50"), ("p99_us", "p99"), ("p999_us", "p99.9"))):
                ax.bar([j + i * 0.27 for j in range(len(rows))], [r["median"][k] for r in rows], width=0.27, label=name)
            ax.set_xticks([j + 0.27 for j in range(len(rows))])
            ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
            ax.set_yscale("log")
            ax.set_title(f"round trip, {_fmt_size(size)}")
            ax.grid(True, axis="y", alpha=0.3)
        axes[0].set_ylabel("µs")
        axes[0].legend()
        fig.tight_layout()
        path = out_dir / f"{prefix}latency.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def summary_line(data: dict) -> str:
    met = [t for t in targets(data) if t["met"] is not None]
    return f"{sum(t['met'] for t in met)} of {len(met)} measurable targets met"


def load(path: Path) -> Any:
    import json

    return json.loads(Path(path).read_text())
