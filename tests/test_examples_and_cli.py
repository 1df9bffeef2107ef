"""The documented examples run, and the command line works."""

import subprocess
import sys
import threading
from pathlib import Path

import pytest

import lwmq
from lwmq.cli import main

EXAMPLES = sorted((Path(__file__).parent.parent / "docs" / "examples").glob("*.py"))
EXPECTED = {
    "quickstart.py": "b'AAPL' b'189.52'\nb'cancel all'\n",
    "tensors.py": "(4, 8) float32 0.0\n(4, 8) float32 1.0\n(4, 8) float32 2.0\n",
    "asyncio_echo.py": "[b'one', b'two', b'three']\n",
    "two_processes.py": "[1, 4, 9, 16, 25]\nworker exit code 0\n",
}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(example):
    out = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == EXPECTED[example.name]


def test_every_example_has_an_expected_output():
    assert {p.name for p in EXAMPLES} == set(EXPECTED)


def test_help_and_version():
    out = subprocess.run([sys.executable, "-m", "lwmq", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "demo" in out.stdout and "transports" in out.stdout
    out = subprocess.run([sys.executable, "-m", "lwmq", "--version"], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == f"lwmq {lwmq.__version__} ({lwmq.build_profile} build)"


def test_transports_command(capsys):
    assert main(["transports"]) == 0
    assert "inproc://" in capsys.readouterr().out


def test_send_and_recv_commands(capsys, uri):
    receiver = threading.Thread(target=main, args=(["recv", uri, "--count", "2", "--timeout", "5"],))
    receiver.start()
    assert main(["send", uri, "-m", "hello", "-m", "world"]) == 0
    receiver.join(timeout=10)
    assert capsys.readouterr().out == "hello\nworld\n"


def test_demo_runs_and_checks_its_count():
    out = subprocess.run(
        [sys.executable, "-m", "lwmq", "ping", "--messages", "20000", "--round-trips", "200"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "msg/s" in out.stdout and "20,000 messages" in out.stdout and "round trip p50" in out.stdout
    assert "between two processes" in out.stdout
