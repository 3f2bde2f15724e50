"""Trace lookup by id over millions of spans in many files, before and after scheduled
maintenance (no manual step).

    .venv/bin/python -m bench.trace_lookup                   # 5M spans in 250 commits
    .venv/bin/python -m bench.trace_lookup --spans 500000 --commits 50   # a quick look

Spans are generated directly as Arrow tables with the SPANS schema (random trace ids, five
spans per trace, 5 services x 2 dates) and appended through the connector's bulk_insert (the
bridge's writer), one commit per batch: many small files, like a bridge after a day. Then:
1. trace lookups (connector `trace`) by random existing ids: p50/p90 latency, files scanned;
2. one round of scheduled maintenance with its defaults (`maintain_table`, as `serve` runs it
   every hour; both dates are closed days, so their partitions are sorted by trace id across
   their files), and the same lookups again;
3. a query filtered by service/date (partition pruning) against the same condition without
   the partition filter (a full scan of every file). Writes bench/results/trace-latest.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench.common import RESULTS_DIR, machine, workdir, write_results
from otel_delta import DeltaConfig, DeltaLakeConnector
from otel_delta.maintenance.tasks import TablePolicy, maintain_table
from otel_delta.tables.schemas import SPANS

SERVICES = [f"svc-{i}" for i in range(5)]
DATES = [dt.date(2026, 11, 19), dt.date(2026, 11, 20)]
SPANS_PER_TRACE = 5
RESULTS = RESULTS_DIR / "trace-latest.json"


def hex_ids(rng: np.random.Generator, n: int, nbytes: int) -> pa.Array:
    raw = rng.integers(0, 256, size=(n, nbytes), dtype=np.uint8).tobytes()
    width = nbytes * 2
    text = raw.hex()
    return pa.array([text[i * width : (i + 1) * width] for i in range(n)], pa.string())


def span_batch(rng: np.random.Generator, n: int) -> tuple[pa.Table, list[str]]:
    traces = n // SPANS_PER_TRACE
    trace_ids = hex_ids(rng, traces, 16)
    trace_col = pa.array(np.repeat(np.array(trace_ids.to_pylist(), dtype=object), SPANS_PER_TRACE))
    n = traces * SPANS_PER_TRACE
    service = rng.integers(0, len(SERVICES), traces).repeat(SPANS_PER_TRACE)
    day = rng.integers(0, len(DATES), traces).repeat(SPANS_PER_TRACE)
    base = np.array([int(dt.datetime.combine(d, dt.time(), dt.UTC).timestamp()) for d in DATES])
    start = (base[day] * 10**9 + rng.integers(0, 86_000 * 10**9, n)).astype(np.int64)
    duration = rng.integers(10_000, 50_000_000, n).astype(np.int64)
    error = rng.random(n) < 0.01
    columns = {
        "service_name": pa.array(np.array(SERVICES, dtype=object)[service]),
        "date": pa.array(np.array(DATES, dtype=object)[day], pa.date32()),
        "start_time": pa.array(start // 1000, pa.timestamp("us", tz="UTC")),
        "trace_id": trace_col,
        "span_id": hex_ids(rng, n, 8),
        "parent_span_id": pa.array([""] * n),
        "name": pa.array(
            np.array(["GET /api", "SELECT", "publish", "auth", "render"])[
                rng.integers(0, 5, n)
            ].astype(object)
        ),
        "kind": pa.array(["SPAN_KIND_SERVER"] * n),
        "start_time_unix_nano": pa.array(start),
        "duration_ns": pa.array(duration),
        "status_code": pa.array(
            np.where(error, "STATUS_CODE_ERROR", "STATUS_CODE_UNSET").astype(object)
        ),
    }
    table = pa.table(
        {f.name: columns.get(f.name, pa.nulls(n, f.type)) for f in SPANS}, schema=SPANS
    )
    return table, trace_ids.to_pylist()


def lookups(spans, trace_ids: list[str]) -> dict:
    latencies, scanned, groups, found = [], [], [], []
    for trace_id in trace_ids:
        t = time.perf_counter()
        rows = spans.trace(trace_id)
        latencies.append(time.perf_counter() - t)
        found.append(rows.num_rows)
        plan = spans.trace_query(trace_id).explain()
        scanned.append(plan.files_scanned)
        groups.append((plan.row_groups_scanned, plan.row_groups_total))
    return {
        "lookups": len(trace_ids),
        "p50_ms": round(statistics.median(latencies) * 1000, 1),
        "p90_ms": round(statistics.quantiles(latencies, n=10)[-1] * 1000, 1),
        "files_scanned_p50": statistics.median(scanned),
        "row_groups_scanned_p50": statistics.median(g[0] for g in groups),
        "row_groups_total": groups[0][1],
        "spans_found_min": min(found),
    }


def filtered_query(spans, where: str) -> dict:
    t = time.perf_counter()
    result = spans.query().filter(where).execute()
    elapsed = time.perf_counter() - t
    return {
        "where": where,
        "ms": round(elapsed * 1000, 1),
        "rows": result.num_rows,
        "files_scanned": result.scan.files_scanned,
        "files_total": result.scan.files_total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=5_000_000)
    parser.add_argument("--commits", type=int, default=250)
    parser.add_argument("--lookups", type=int, default=25)
    parser.add_argument("--dir", help="lake directory (default: a temporary one)")
    args = parser.parse_args()
    rng = np.random.default_rng(42)
    with workdir(prefix="trace-bench-") as tmp:
        root = Path(args.dir or tmp) / "lake"
        lake = DeltaLakeConnector(DeltaConfig.for_path(root))
        spans = lake.get_or_create_table("spans")
        per_commit = args.spans // args.commits
        sample: list[str] = []
        t = time.perf_counter()
        for i in range(args.commits):
            batch, ids = span_batch(rng, per_commit)
            spans.bulk_insert(batch)
            sample.extend(ids[:: max(1, len(ids) // 2)][:1])
            if i % 50 == 0:
                print(f"  commit {i}/{args.commits}", flush=True)
        generate_s = time.perf_counter() - t
        spans = lake.table("spans")
        stats_before = spans.statistics()
        print(
            f"generated {stats_before.rows} spans in {stats_before.files} files, {generate_s:.0f}s"
        )
        chosen = [sample[i] for i in rng.choice(len(sample), args.lookups, replace=False)]
        day = DATES[1].isoformat()
        where_all = "status_code = 'STATUS_CODE_ERROR' AND duration_ns > 40000000"
        where_part = f"service_name = 'svc-1' AND date = '{day}' AND {where_all}"
        before = lookups(spans, chosen)
        print("before maintenance:", before, flush=True)
        scans_before = [filtered_query(spans, where_part), filtered_query(spans, where_all)]
        t, cpu = time.perf_counter(), time.process_time()
        maintained = maintain_table(spans, TablePolicy(vacuum=False, checkpoint=True))
        optimize_s, optimize_cpu = time.perf_counter() - t, time.process_time() - cpu
        if maintained.errors:
            raise SystemExit(f"maintenance failed: {maintained.errors}")
        spans = lake.table("spans")
        stats_after = spans.statistics()
        after = lookups(spans, chosen)
        print(
            f"maintenance: {optimize_s:.0f}s ({optimize_cpu:.0f}s of CPU), {stats_after.files} "
            f"files, {stats_before.size_bytes / 2**20:.1f} -> {stats_after.size_bytes / 2**20:.1f} "
            "MiB; after:",
            after,
            flush=True,
        )
        scans_after = [filtered_query(spans, where_part), filtered_query(spans, where_all)]
    result = {
        "machine": machine(),
        "spans": stats_before.rows,
        "commits": args.commits,
        "generate_seconds": round(generate_s, 1),
        "before_maintenance": {
            "files": stats_before.files,
            "bytes": stats_before.size_bytes,
            "trace_lookup": before,
            "scans": scans_before,
        },
        "maintenance": {
            "seconds": round(optimize_s, 1),
            "cpu_seconds": round(optimize_cpu, 1),
            "partitions_clustered": maintained.partitions_clustered,
            "files_removed": maintained.files_compacted,
            "files_added": maintained.files_written,
        },
        "after_maintenance": {
            "files": stats_after.files,
            "bytes": stats_after.size_bytes,
            "trace_lookup": after,
            "scans": scans_after,
        },
    }
    write_results(result, RESULTS)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
