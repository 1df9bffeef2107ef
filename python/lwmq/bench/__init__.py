"""lwmq's benchmark harness: lwmq and its peers measured in the same run, each as two Python processes.
Run it with `lwmq bench` (or `make bench`, `make bench-quick`)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import harness, report


def main(
    quick: bool = False,
    repetitions: int | None = None,
    out: str = "benchmarks/results",
    only: list[str] | None = None,
    scale: float = 1.0,
) -> int:
    console = Console()
    reps = repetitions or (1 if quick else 3)
    cases = harness.plan(quick, only, scale)
    out_dir = Path(out)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("benchmarking", total=len(cases) * reps)

        def progress(c, size, _result):
            bar.update(task, advance=1 if _result is not None or harness.available(c) is None else reps, description=f"{c.name} {size} B")

        data = harness.run(quick, reps, only, progress, scale)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Only a full run of every contender writes the names the docs show; a quick or partial run
    # writes beside them (bench-quick.json, quick-*.png, ...) instead of over them.
    name = ("quick" if quick else "full") + ("-partial" if only else "")
    path = out_dir / f"bench-{name}.json"
    path.write_text(json.dumps(data, indent=1))
    report.print_report(data, console)
    plots = report.plot(data, out_dir, prefix="" if name == "full" else f"{name}-")
    console.print(f"{report.summary_line(data)}. JSON: {path}; plots: " + ", ".join(str(p) for p in plots))
    return 0
