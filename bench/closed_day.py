"""Sorting one closed day's partition across its files: our distribution sort against
delta-rs's Z-order on the same files, each in a process of its own.

One (service, date) partition of `--spans` spans (bench.trace_lookup's generator: random trace
ids, five spans per trace) is appended in `--commits` commits, then sorted by trace id as
maintenance sorts a closed day (otel_delta/maintenance/closed_days.py). Per writer: wall and
CPU seconds of the sort, the growth of peak RSS during it, bytes and files before and after.

    .venv/bin/python -m bench.closed_day --spans 2000000 --commits 100
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import resource
import subprocess
import sys
import time

import numpy as np

from bench import trace_lookup
from bench.common import workdir
from otel_delta import DeltaConfig, DeltaLakeConnector
from otel_delta.maintenance import closed_days, compaction
from otel_delta.tables import TABLES

WRITERS = ("ours", "zorder")
TARGET_SIZE = 128 * 1024 * 1024  # maintenance's default file_size_target


def run(writer: str, spans: int, commits: int) -> dict:
    """In this process: build the partition, sort it with `writer`, measure."""
    trace_lookup.SERVICES = ["svc-0"]
    trace_lookup.DATES = [dt.date(2026, 11, 19)]
    rng = np.random.default_rng(3)
    with workdir() as path:
        table = DeltaLakeConnector(DeltaConfig.for_path(path)).get_or_create_table("spans")
        for _ in range(commits):
            batch, _ids = trace_lookup.span_batch(rng, spans // commits)
            table.bulk_insert(batch)
        before = table.statistics()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if writer == "zorder":
            closed_days.MAX_BUCKETS = 0  # every partition goes to delta-rs
        wall, cpu = time.perf_counter(), time.process_time()
        closed_days.cluster_partitions(
            table.delta(),
            TABLES["spans"].layout,
            compaction.RewriteOptions(),
            include=lambda values: True,
            target_size=TARGET_SIZE,
        )
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        after = table.statistics()
        return {
            "writer": writer,
            "rows": before.rows,
            "rows_after": after.rows,
            "bytes_before": before.size_bytes,
            "files_before": before.files,
            "bytes_after": after.size_bytes,
            "files_after": after.files,
            "wall_seconds": round(wall, 1),
            "cpu_seconds": round(cpu, 1),
            "peak_rss_growth_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            - rss_before,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=2_000_000)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--writer", choices=WRITERS, help="one writer, in this process")
    args = parser.parse_args()
    if args.writer:
        print(json.dumps(run(args.writer, args.spans, args.commits)))
        return 0
    for writer in WRITERS:
        argv = [sys.executable, "-m", "bench.closed_day", "--writer", writer]
        argv += ["--spans", str(args.spans), "--commits", str(args.commits)]
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        r = json.loads(out.splitlines()[-1])
        print(
            f"{writer:7} {r['rows']:,} spans, {r['bytes_before'] / 2**20:.1f} MiB in "
            f"{r['files_before']} files -> {r['bytes_after'] / 2**20:.1f} MiB in "
            f"{r['files_after']} files ({r['rows_after']:,} spans); {r['wall_seconds']} s wall, "
            f"{r['cpu_seconds']} s CPU, peak RSS +{r['peak_rss_growth_bytes'] / 2**20:.0f} MiB",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
