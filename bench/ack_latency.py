"""How long does one small Export wait for its answer, with `ack = "wal"` and `ack = "commit"`?

Serial Exports (one span each, one at a time, as a lightly loaded SDK sends them) to the bridge
as users start it, default flush interval (1 s), same requests for both modes in the same run.
Beside them, the cost of the fsync the WAL waits for: appending a record-sized write to a file
in the same directory and fsync'ing it, timed alone.

    python -m bench.ack_latency [--wal-exports 1000] [--commit-exports 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from bench.common import (
    RESULTS_DIR,
    BridgeProcess,
    build_payloads,
    count_rows,
    finish,
    workdir,
)

RESULTS_FILE = RESULTS_DIR / "ack-latency-latest.json"
TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    values = np.array(samples_ms)
    return {
        "p50_ms": float(np.percentile(values, 50)),
        "p99_ms": float(np.percentile(values, 99)),
        "max_ms": float(values.max()),
    }


def fsync_cost(directory: Path, count: int, size: int) -> dict[str, float]:
    """append `size` bytes + fsync, `count` times, on the file system the WAL uses."""
    path = directory / "fsync-probe"
    samples = []
    with open(path, "ab") as out:
        for _ in range(count):
            started = time.perf_counter()
            out.write(b"\0" * size)
            out.flush()
            os.fsync(out.fileno())
            samples.append((time.perf_counter() - started) * 1000)
    path.unlink()
    return percentiles(samples)


def serial_exports(ack: str, requests: list[bytes], flush_interval: float) -> dict[str, Any]:
    with workdir() as path:
        server = BridgeProcess(path, flush_interval, 0, "auto", ack)
        try:
            port = server.wait_for_port()
            channel = grpc.insecure_channel(f"127.0.0.1:{port}")
            export = channel.unary_unary(TRACE_EXPORT)
            export(requests[0], timeout=30)  # warm-up: connection, first table creation
            samples = []
            for raw in requests[1:]:
                started = time.perf_counter()
                export(raw, timeout=30)
                samples.append((time.perf_counter() - started) * 1000)
            channel.close()
        except BaseException:
            server.kill()
            raise
        exit_code = server.stop()
        fsyncs = [line for line in server.log_tail if "fsyncs" in line]
        return {
            "ack": ack,
            "exports": len(samples),
            **percentiles(samples),
            "rows_in_table": count_rows(server.lake),
            "exit_code": exit_code,
            "wal_log_line": fsyncs[-1] if fsyncs else None,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wal-exports", type=int, default=1000)
    parser.add_argument("--commit-exports", type=int, default=20, help="each waits ~1 flush")
    parser.add_argument("--flush-interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    payloads = build_payloads(args.wal_exports + 1, 1, seed=3)
    requests = [p.data for p in payloads]
    with workdir() as probe_dir:
        fsync = fsync_cost(probe_dir, 200, 600)
    runs = [
        serial_exports("commit", requests[: args.commit_exports + 1], args.flush_interval),
        serial_exports("wal", requests, args.flush_interval),
    ]
    print(
        f"otel-delta ack latency: serial 1-span Exports, flush interval {args.flush_interval} s, "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"  fsync of a 600-byte append alone    p50 {fsync['p50_ms']:7.2f}  "
        f"p99 {fsync['p99_ms']:7.2f}  max {fsync['max_ms']:7.2f} ms"
    )
    problems = []
    for run in runs:
        print(
            f"  ack = {run['ack']:<7} {run['exports']:>5} exports     p50 {run['p50_ms']:7.2f}  "
            f"p99 {run['p99_ms']:7.2f}  max {run['max_ms']:7.2f} ms   "
            f"rows {run['rows_in_table']:,}"
        )
        if run["rows_in_table"] != run["exports"] + 1 or run["exit_code"] != 0:
            problems.append(f"ack = {run['ack']}: rows or exit code wrong: {run}")
    return finish(RESULTS_FILE, vars(args), problems, fsync_alone=fsync, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
