"""The lake on S3 against the lake on local disk, in one run: ingest throughput and commit latency.

The S3 side is versitygw (`make s3-server`) on loopback, serving a folder on the same disk as
the local lake: what differs is the object-store path (HTTP requests, signing, conditional PUT
of each commit, listing the log), not the disk. Loopback hides network latency, so against a
real S3 endpoint commit latency adds the round trips; the figures here are the bridge's own cost.

1. **Ingest**: `otel-delta serve` (ack = wal, its default) fed the same pre-serialized trace
   requests by N client threads; spans/s *into Delta* = rows in the table / (first send → the
   bridge exited after SIGTERM, its last commits included); the local and S3 runs alternate
   for `--rounds` rounds and the median run of each is reported.
2. **Commit latency**: the bridge's writer (`DeltaRsEngine.append`) commits the same Arrow
   table of `--commit-rows` spans `--commits` times to a local table and to an S3 table,
   alternating; p50/p99/max per store.

    .venv/bin/python -m bench.object_storage --spans 200000 --clients 8
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from deltalake import DeltaTable
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bench.common import (
    RESULTS_DIR,
    BridgeProcess,
    build_payloads,
    drive,
    finish,
    run_problem,
    workdir,
)
from otel_delta.convert import spans_to_arrow
from otel_delta.engines import DeltaRsEngine
from otel_delta.lakehouse import Lakehouse
from tests.s3 import S3Server, versitygw

RESULTS_FILE = RESULTS_DIR / "object-storage-latest.json"
STORES = ("local", "s3")


def storage_env(s3: S3Server) -> dict[str, str]:
    """The S3 lake as environment settings (what a deployment's deltalake.toml would hold)."""
    env = {"OTEL_DELTA_DELTALAKE__TABLE_PATH": s3.url("lake")}
    for key, value in s3.storage_options().items():
        env[f"OTEL_DELTA_DELTALAKE__STORAGE__OPTIONS__{key}"] = value
    return env


def ingest_run(store: str, s3: S3Server, args: argparse.Namespace, payloads) -> dict:
    with workdir() as path:
        bucket = s3.new_bucket()
        env = storage_env(bucket) if store == "s3" else None
        server = BridgeProcess(path, args.flush_interval, 0, "auto", "wal", env=env)
        try:
            port = server.wait_for_port()
            cpu_before = server.cpu_seconds()
            ingest = drive(port, payloads, args.clients, args.max_seconds)
            stopping = time.perf_counter()
            code = server.stop()
            stop_seconds = time.perf_counter() - stopping
            server_cpu = server.stats.cpu_seconds - cpu_before
        except BaseException:
            server.kill()
            raise
        uri, options = (
            (bucket.url("lake", "spans"), bucket.storage_options())
            if store == "s3"
            else (str(server.lake / "spans"), None)
        )
        table = DeltaTable(uri, storage_options=options)
        rows = table.count()
        commits = table.version()
    seconds = ingest.seconds + stop_seconds
    return {
        "store": store,
        "spans_acked": ingest.spans_acked,
        "rows_in_table": rows,
        "commits": commits,
        "acked_spans_per_second": round(ingest.rate),
        "in_delta_spans_per_second": round(rows / seconds) if seconds else 0,
        "seconds_to_exit": round(seconds, 2),
        "p50_ms": round(ingest.p50_ms, 2),
        "p99_ms": round(ingest.p99_ms, 2),
        "server_cpu_us_per_span": round(server_cpu / max(rows, 1) * 1e6, 2),
        "peak_rss_mib": round(server.stats.peak_rss_bytes / 2**20),
        "errors": str(ingest.errors) if ingest.errors else "",
        "exit_code": code,
    }


def commit_latency(s3: S3Server, args: argparse.Namespace, root: Path) -> dict[str, dict]:
    """The writer's append (Parquet encode, upload, log commit) timed on each store."""
    payload = build_payloads(args.commit_rows, args.commit_rows, seed=11)[0]
    request = ExportTraceServiceRequest.FromString(payload.data)
    rows = spans_to_arrow(request).tables["spans"]
    bucket = s3.new_bucket()
    engines = {
        "local": DeltaRsEngine(Lakehouse(str(root / "lake"))),
        "s3": DeltaRsEngine(
            Lakehouse(bucket.url("lake"), storage_options=bucket.storage_options())
        ),
    }
    for engine in engines.values():
        engine.append("spans", rows)  # creates the table and warms the handle
    times: dict[str, list[float]] = {store: [] for store in STORES}
    for _ in range(args.commits):
        for store in STORES:
            started = time.perf_counter()
            engines[store].append("spans", rows)
            times[store].append((time.perf_counter() - started) * 1000)
    return {store: _percentiles(values) for store, values in times.items()}


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "commits": len(ordered),
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))], 2),
        "max_ms": round(ordered[-1], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=200_000)
    parser.add_argument("--spans-per-request", type=int, default=8192, help="the batch default")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--flush-interval", type=float, default=10.0, help="the default")
    parser.add_argument("--max-seconds", type=float, default=180.0)
    parser.add_argument("--rounds", type=int, default=3, help="ingest runs per store; median")
    parser.add_argument("--commits", type=int, default=40, help="timed commits per store")
    parser.add_argument("--commit-rows", type=int, default=8192)
    args = parser.parse_args(argv)
    payloads = build_payloads(args.spans, args.spans_per_request, seed=7)
    runs: dict[str, list[dict]] = {store: [] for store in STORES}
    with workdir("otel-delta-s3-bench-") as root, versitygw(root / "s3") as s3:
        for round_ in range(args.rounds):  # alternating: drift on the machine hits both alike
            for store in STORES:
                result = ingest_run(store, s3, args, payloads)
                runs[store].append(result)
                print(
                    f"round {round_ + 1} {store}: {result['in_delta_spans_per_second']:,} "
                    "spans/s into Delta",
                    file=sys.stderr,
                )
        latency = commit_latency(s3, args, root)
    median = {
        store: sorted(results, key=lambda r: r["in_delta_spans_per_second"])[len(results) // 2]
        for store, results in runs.items()
    }
    print(
        f"{'store':<8}{'into Delta/s':>14}{'acked/s':>10}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'µs/span':>9}{'commits':>9}"
    )
    for store, r in median.items():
        print(
            f"{store:<8}{r['in_delta_spans_per_second']:>14,}{r['acked_spans_per_second']:>10,}"
            f"{r['p50_ms']:>9}{r['p99_ms']:>9}{r['server_cpu_us_per_span']:>9}{r['commits']:>9}"
        )
    ratio = median["s3"]["in_delta_spans_per_second"] / max(
        median["local"]["in_delta_spans_per_second"], 1
    )
    print(f"S3 / local into Delta: {ratio:.2f}")
    print(f"commit of {args.commit_rows} spans:")
    for store, figures in latency.items():
        print(
            f"  {store:<6} p50 {figures['p50_ms']} ms  p99 {figures['p99_ms']} ms  "
            f"max {figures['max_ms']} ms  ({figures['commits']} commits)"
        )
    found = (run_problem(r["store"], r) for results in runs.values() for r in results)
    problems = [problem for problem in found if problem]
    return finish(
        RESULTS_FILE,
        vars(args),
        problems,
        ingest=median,
        all_rounds={s: [r["in_delta_spans_per_second"] for r in rs] for s, rs in runs.items()},
        s3_over_local=round(ratio, 3),
        commit_latency=latency,
    )


if __name__ == "__main__":
    sys.exit(main())
