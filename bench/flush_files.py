"""Which `flush_interval_seconds` gives sensible files at a steady 2,000 spans/s (ack = "wal")?

With acks decoupled from commits (write-ahead log), the flush interval only decides how many
rows each commit — and so each Parquet file — holds: short intervals flood the table with small
files (more log entries, slower reads, more compaction), long ones hold more rows in memory and
make them visible later. This drives the bridge as users start it at a steady rate with
realistic spans (bench/common.py), one run per interval, same requests, and reports the files
written: count, median and mean size, rows per file, commits.

    python -m bench.flush_files [--rate 2000] [--seconds 30] [--intervals 1 5 10 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import grpc
import pyarrow as pa
from deltalake import DeltaTable

from bench.common import (
    RESULTS_DIR,
    BridgeProcess,
    build_payloads,
    finish,
    workdir,
)

RESULTS_FILE = RESULTS_DIR / "flush-files-latest.json"
TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SPANS_PER_REQUEST = 100


def steady(port: int, requests: list[bytes], rate: float) -> tuple[int, float]:
    """Send one request every SPANS_PER_REQUEST / rate seconds; returns (acked, max ms)."""
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    export = channel.unary_unary(TRACE_EXPORT)
    period = SPANS_PER_REQUEST / rate
    start = time.perf_counter()
    acked, worst = 0, 0.0
    for index, raw in enumerate(requests):
        delay = start + index * period - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        sent = time.perf_counter()
        export(raw, timeout=30)
        worst = max(worst, (time.perf_counter() - sent) * 1000)
        acked += SPANS_PER_REQUEST
    channel.close()
    return acked, worst


def run(interval: float, requests: list[bytes], rate: float) -> dict[str, Any]:
    with workdir() as path:
        server = BridgeProcess(path, interval, 0, "auto", "wal")
        try:
            acked, worst_ms = steady(server.wait_for_port(), requests, rate)
        except BaseException:
            server.kill()
            raise
        code = server.stop()
        table = DeltaTable(str(server.lake / "spans"))
        actions = pa.table(table.get_add_actions(flatten=True))
        sizes = actions.column("size_bytes").to_pylist()
        rows = actions.column("num_records").to_pylist()
        commits = sum(1 for h in table.history() if h["operation"] == "WRITE")
        return {
            "flush_interval_seconds": interval,
            "spans_acked": acked,
            "rows_in_table": sum(rows),
            "exit_code": code,
            "commits": commits,
            "files": len(sizes),
            "median_file_bytes": statistics.median(sizes),
            "mean_file_bytes": statistics.fmean(sizes),
            "mean_rows_per_file": statistics.fmean(rows),
            "partitions": len(set(actions.column("partition.service_name").to_pylist())),
            "worst_ack_ms": worst_ms,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2000.0, help="spans per second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--intervals", type=float, nargs="+", default=[1.0, 5.0, 10.0, 30.0])
    args = parser.parse_args(argv)
    total = int(args.rate * args.seconds)
    requests = [p.data for p in build_payloads(total, SPANS_PER_REQUEST, seed=5)]
    runs = [run(interval, requests, args.rate) for interval in args.intervals]
    print(
        f"otel-delta flush interval vs files: {args.rate:,.0f} spans/s for {args.seconds:.0f} s "
        f"({total:,} spans, {SPANS_PER_REQUEST} per request, 5 services), ack = wal, "
        f"{os.cpu_count()} CPUs"
    )
    print("  interval  commits  files  median file  mean file  rows/file  worst ack")
    problems = []
    for r in runs:
        print(
            f"  {r['flush_interval_seconds']:>6.0f} s  {r['commits']:>7}  {r['files']:>5}  "
            f"{r['median_file_bytes'] / 1024:>8.0f} KiB  {r['mean_file_bytes'] / 1024:>6.0f} KiB  "
            f"{r['mean_rows_per_file']:>9,.0f}  {r['worst_ack_ms']:>6.1f} ms"
        )
        if r["rows_in_table"] != r["spans_acked"] or r["exit_code"] != 0:
            problems.append(f"interval {r['flush_interval_seconds']}: rows or exit code: {r}")
    return finish(RESULTS_FILE, vars(args), problems, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
