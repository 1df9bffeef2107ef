"""Runs every contender in two separate processes, the same way, in one run; repeats; keeps medians."""

from __future__ import annotations

import importlib.util
import itertools
import multiprocessing
import os
import platform
import queue as queue_module
import socket
import statistics
import time
from typing import Any

# numpy (memcpy reference) must not leave OpenBLAS threads spinning beside the contenders.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from . import bus, peers
from .peers import CONTENDERS, Contender

# Publish-to-delivery round trips over two buses (two PUB/SUB pairs for pyzmq), 64 B.
BUS_LATENCY = [
    Contender("lwmq bus", "latency", bus.lwmq_bus_ping, bus.lwmq_bus_pong, sizes=(bus.SIZE,), module="lwmq"),
    Contender("pyzmq PUB/SUB ipc", "latency", bus.zmq_pubsub_ping, bus.zmq_pubsub_pong, sizes=(bus.SIZE,), module="zmq"),
]
ALL = [*CONTENDERS, *BUS_LATENCY, *bus.PUBSUB]
# Messages per publisher in a publish/subscribe run (full mode), by layout.
PUBSUB_COUNTS = {(1, 1): 1_000_000, (4, 4): 250_000}

SIZES = (16, 256, 4096, 65536, 1 << 20)
LATENCY_SIZES = (16, 4096)
# Messages per throughput run by size, for the full mode; quick mode uses a fifth.
COUNTS = {16: 1_000_000, 256: 1_000_000, 4096: 300_000, 65536: 30_000, 1 << 20: 3_000}
ROUND_TRIPS = 20_000
CASE_TIMEOUT = 180.0
_ids = itertools.count()


def available(c: Any) -> str | None:
    """None if the contender can run here, else why not."""
    if c.module and importlib.util.find_spec(c.module) is None:
        return f"python module {c.module!r} is not installed"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _address(c: Contender) -> str:
    tag = f"lwmq-bench-{os.getpid()}-{next(_ids)}"
    if c.name.startswith("lwmq bus"):
        return f"bus://{tag}"
    if "PUB/SUB" in c.name:
        return tag  # the pub/sub roles derive their ipc://@ addresses from it
    if c.name.startswith("lwmq"):
        return f"ipc://{tag}"
    if "tcp" in c.name:
        return f"tcp://127.0.0.1:{_free_port()}"
    if "pyzmq" in c.name:
        return f"ipc://@{tag}"  # libzmq's abstract namespace: nothing on disk
    if "iceoryx2" in c.name:
        return f"lwmq-bench/{tag}"  # an iceoryx2 service name
    return tag


IDLE = Contender("lwmq ipc idle", "idle", peers.lwmq_idle_connect, peers.lwmq_idle_listen, module="lwmq")


def _role(name: str, kind: str, role: str, spec: dict, results: Any) -> None:
    contender = IDLE if kind == "idle" else next(c for c in ALL if c.name == name and c.kind == kind)
    try:
        results.put((role, "ok", getattr(contender, role)(spec)))
    except BaseException as e:  # noqa: BLE001 - reported by the harness
        results.put((role, "error", f"{type(e).__name__}: {e}"))


def _reap(procs: Any, results: Any) -> None:
    """Joins a case's processes, killing any that do not end within 5 s."""
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()
    results.close()


def run_case(c: Contender, size: int, count: int, warmup: int | None = None, both: bool = False) -> Any:
    """One measurement: the two roles in two processes. Returns the measuring side's result."""
    ctx = multiprocessing.get_context("spawn")
    spec: dict[str, Any] = {
        "size": size,
        "count": count,
        "warmup": min(1000, count) if warmup is None else warmup,
        "address": _address(c),
        "options": c.options,
        "ready": ctx.Event(),
        "seconds": 2.0,
    }
    if "Pipe" in c.name:
        spec["pipe"] = ctx.Pipe(duplex=True)
    results = ctx.Queue()
    procs = {role: ctx.Process(target=_role, args=(c.name, c.kind, role, spec, results), daemon=True) for role in ("b", "a")}
    for p in procs.values():
        p.start()
    measuring = "b" if c.kind == "throughput" else "a"
    outcome: dict[str, tuple[str, Any]] = {}
    deadline = time.monotonic() + CASE_TIMEOUT
    try:
        while len(outcome) < 2:
            left = deadline - time.monotonic()
            if left <= 0:
                waiting = [{"a": "sender/ping", "b": "receiver/pong"}[r] for r in ("a", "b") if r not in outcome]
                codes = {r: p.exitcode for r, p in procs.items()}
                raise TimeoutError(
                    f"{c.name} {size} B did not finish within {CASE_TIMEOUT:.0f} s "
                    f"(no result from {', '.join(waiting)}; exit codes {codes})"
                )
            try:
                role, status, value = results.get(timeout=min(left, 1.0))
            except queue_module.Empty:
                dead = [r for r, p in procs.items() if not p.is_alive() and r not in outcome]
                if dead and all(not p.is_alive() for p in procs.values()):
                    raise RuntimeError(f"{c.name}: process {dead} died without a result") from None
                continue
            outcome[role] = (status, value)
            if status == "error":
                break
    finally:
        _reap(procs.values(), results)
    errors = [v for s, v in outcome.values() if s == "error"]
    if errors:
        raise RuntimeError("; ".join(errors))
    if both:
        return {role: value for role, (_, value) in outcome.items()}
    return outcome[measuring][1]


def _pubsub_role(name: str, role: str, spec: dict, results: Any) -> None:
    contender = next(c for c in bus.PUBSUB if c.name == name)
    try:
        results.put((role, "ok", getattr(contender, "publish" if role.startswith("p") else "subscribe")(spec)))
    except BaseException as e:  # noqa: BLE001 - reported by the harness
        results.put((role, "error", f"{type(e).__name__}: {e}"))


def run_pubsub_case(c: bus.PubSub, count: int) -> dict:
    """P publisher and S subscriber processes; `count` messages per publisher, each delivered to every
    subscriber. Returns aggregate delivered messages/s, first delivery to last across subscribers."""
    ctx = multiprocessing.get_context("spawn")
    publishers, subscribers = c.layout
    spec: dict[str, Any] = {
        "size": bus.SIZE, "count": count, "publishers": publishers, "address": _address(c), "options": c.options,
        "ready": ctx.Value("i", 0), "go": ctx.Event(), "finished": ctx.Event(),
    }
    results = ctx.Queue()
    roles = [f"s{i}" for i in range(subscribers)] + [f"p{i}" for i in range(publishers)]
    procs = {}
    for role in roles:  # subscribers first: they join before anything is published
        procs[role] = ctx.Process(target=_pubsub_role, args=(c.name, role, {**spec, "index": int(role[1:])}, results), daemon=True)
        procs[role].start()
    outcome: dict[str, tuple[str, Any]] = {}
    deadline = time.monotonic() + CASE_TIMEOUT
    try:
        while spec["ready"].value < len(roles):
            if time.monotonic() > deadline or not all(p.is_alive() for p in procs.values()):
                raise RuntimeError(f"{c.name}: {spec['ready'].value} of {len(roles)} members got ready")
            time.sleep(0.01)
        spec["go"].set()
        while len(outcome) < len(roles):
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(roles) - set(outcome))
                raise TimeoutError(f"{c.name} did not finish within {CASE_TIMEOUT:.0f} s (no result from {missing})")
            try:
                role, status, value = results.get(timeout=min(left, 1.0))
            except queue_module.Empty:
                continue
            outcome[role] = (status, value)
            if status == "error":
                break
            if all(r in outcome for r in roles if r.startswith("s")):
                spec["finished"].set()  # pyzmq publishers may close now
    finally:
        spec["finished"].set()
        _reap(procs.values(), results)
    errors = [f"{r}: {v}" for r, (s_, v) in outcome.items() if s_ == "error"]
    if errors:
        raise RuntimeError("; ".join(errors))
    subs = [v for r, (_, v) in outcome.items() if r.startswith("s")]
    delivered = sum(v["delivered"] for v in subs)
    expected = count * publishers * subscribers
    if delivered != expected or any(v["lost"] for v in subs):
        raise RuntimeError(f"{c.name}: delivered {delivered} of {expected}, lost {sum(v['lost'] for v in subs)}")
    elapsed = max(v["last"] for v in subs) - min(v["first"] for v in subs)
    rate = delivered / max(elapsed, 1e-9)
    return {"messages_per_s": rate, "gb_per_s": rate * bus.SIZE / 1e9, "seconds": elapsed, "checked": delivered}


def idle_cpu() -> dict:
    """CPU used by each side of an idle ipc channel, both blocked in recv, as a fraction of one core."""
    sides = run_case(IDLE, 16, 1, both=True)
    return {"connector": sides["a"]["cpu_fraction"], "listener": sides["b"]["cpu_fraction"]}


def memcpy_bandwidth() -> dict:
    """The machine's copy bandwidth: the limit any copying transport runs into."""
    import numpy as np

    out = {}
    for label, size, reps in (("1 MiB (in cache)", 1 << 20, 2000), ("64 MiB", 64 << 20, 20)):
        src = np.ones(size, dtype=np.uint8)
        dst = np.empty_like(src)
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for _ in range(reps):
                np.copyto(dst, src)
            best = min(best, time.perf_counter() - t)
        out[label] = size * reps / best / 1e9
    return out


def plan(quick: bool, only: list[str] | None = None, scale: float = 1.0) -> list[tuple[Any, int, int]]:
    cases = []
    for c in ALL:
        if only and not any(o.lower() in c.name.lower() for o in only):
            continue
        sizes = c.sizes or (LATENCY_SIZES if c.kind == "latency" else SIZES)
        for size in sizes:
            base = {"latency": ROUND_TRIPS, "pubsub": PUBSUB_COUNTS.get(getattr(c, "layout", None), 0)}.get(c.kind) or COUNTS[size]
            if c.name == peers.LOAN_CONTENDER:
                # Nothing is copied, so a loan costs the same at every size: as many messages as at 4 KiB,
                # or 3,000 messages of 1 MiB (a few ms) would time the first touch of the pool's pages.
                base = COUNTS[peers.LOAN_SIZES[0]]
            count = max(20, int(base * scale / (5 if quick else 1)))
            cases.append((c, size, count))
    return cases


def run(quick: bool, repetitions: int, only: list[str] | None = None, progress: Any = None, scale: float = 1.0) -> dict:
    cases = plan(quick, only, scale)
    results = []
    skipped = {}
    for c, size, count in cases:
        why = available(c)
        if why:
            skipped[c.name] = why
            if progress:
                progress(c, size, None)
            continue
        runs, errors = [], []
        # A failed attempt (a peer that lost messages, say) is recorded in "errors" and retried, up to
        # as many extra attempts as repetitions, so the median is still taken over `repetitions` runs.
        for _ in range(2 * repetitions):
            if len(runs) == repetitions:
                break
            try:
                runs.append(run_pubsub_case(c, count) if c.kind == "pubsub" else run_case(c, size, count))
            except Exception as e:  # noqa: BLE001 - a failed case is reported, not hidden
                errors.append(str(e))
            if progress:
                progress(c, size, runs[-1] if runs else None)
        entry = {"contender": c.name, "kind": c.kind, "size": size, "count": count, "runs": runs, "errors": errors}
        if runs:
            entry["median"] = {k: statistics.median(r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], (int, float))}
        results.append(entry)
    import lwmq

    return {
        "mode": ("quick" if quick else "full") + ("" if scale == 1.0 else f" x{scale:g}"),
        "repetitions": repetitions,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "lwmq": lwmq.__version__,
            "lwmq_build": lwmq.build_profile,
        },
        "memcpy_gb_per_s": memcpy_bandwidth(),
        "idle_cpu_fraction": idle_cpu() if not only or any("lwmq" in o for o in only) else None,
        "results": results,
        "skipped": skipped,
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
