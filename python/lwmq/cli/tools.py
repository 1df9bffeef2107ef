"""Small command-line tools: list transports, send lines, print received messages."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from .. import connect, listen, transports


def show_transports() -> int:
    table = Table(title="lwmq transports (first of a scheme wins)")
    for column in ("scheme", "provider", "capabilities", "origin"):
        table.add_column(column)
    for t in transports():
        table.add_row(f"{t.scheme}://", t.name, ", ".join(t.capabilities), t.origin)
    Console().print(table)
    return 0


def send_lines(url: str, messages: list[str] | None, timeout: float) -> int:
    with connect(url, timeout=timeout) as ch:
        source = messages if messages is not None else (line.rstrip("\n") for line in sys.stdin)
        for text in source:
            ch.send(text.encode())
    return 0


def print_messages(url: str, count: int, timeout: float | None) -> int:
    with listen(url) as listener, listener.accept(timeout=timeout) as ch:
        for n, message in enumerate(ch, start=1):  # iteration ends when the peer leaves
            print(" | ".join(bytes(f).decode(errors="backslashreplace") for f in message), flush=True)
            if count and n >= count:
                break
    return 0
