"""A smoke run of the benchmark harness on tiny counts: it runs, checks what it receives, and writes well
formed JSON and plots. It measures nothing worth quoting; speed is proven by `make bench`."""

import json
import subprocess
import sys

from lwmq.bench import report


def test_harness_smoke_run(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "lwmq", "bench", "--quick", "--scale", "0.002", "--repetitions", "1",
         "--out", str(tmp_path), "--only", "lwmq", "--only", "Pipe", "--only", "SEQPACKET", "--only", "pyzmq"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "bench-quick-partial.json").read_text())  # quick, some contenders
    assert data["machine"]["lwmq_build"] in ("release", "debug")
    assert set(data["memcpy_gb_per_s"]) == {"1 MiB (in cache)", "64 MiB"}
    assert set(data["idle_cpu_fraction"]) == {"connector", "listener"}
    kinds = {(r["contender"], r["kind"]) for r in data["results"]}
    assert ("lwmq ipc send", "throughput") in kinds and ("lwmq ipc", "latency") in kinds
    assert ("lwmq bus 4x4 publish / recv_batch", "pubsub") in kinds and ("pyzmq PUB/SUB ipc", "pubsub") in kinds
    assert ("lwmq bus", "latency") in kinds
    for r in data["results"]:
        assert r["errors"] == [], r
        (run,) = r["runs"]
        if r["kind"] == "throughput":
            assert run["checked"] == r["count"] and run["messages_per_s"] > 0
        elif r["kind"] == "pubsub":  # every subscriber gets every publisher's messages
            deliveries = r["count"] * (16 if "4x4" in r["contender"] else 1)
            assert run["checked"] == deliveries and run["messages_per_s"] > 0
        else:
            assert run["round_trips"] == r["count"] and 0 < run["p50_us"] <= run["p99_us"] <= run["p999_us"]
    assert all(t["target"] for t in report.targets(data))
    for name in ("throughput-messages.png", "throughput-bandwidth.png", "bus-throughput.png", "latency.png"):
        assert (tmp_path / f"quick-partial-{name}").stat().st_size > 10_000
    assert not (tmp_path / "bench-full.json").exists()  # the names a full run writes are left alone
    assert "Targets" in out.stdout and "memcpy reference" in out.stdout
