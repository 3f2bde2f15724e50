"""Backfill benchmark: the same collector files loaded by the delta-rs path and by Spark.

Builds realistic trace requests (bench.common's generator), writes them as the collector's
file exporter does (`format: proto`: 4-byte big-endian length + message), then loads them into
fresh lakehouses with:

(a) delta-rs: convert in this process, one delta-rs commit per table (`engine = "delta-rs"`);
(b) Spark local (`local[2]`): files split across tasks, one Spark commit per table;
(c) Spark standalone: the same job on a master + one 2-core worker on 127.0.0.1.

Reported: rows/s of each load (hashing, conversion and commit; Spark's session start excluded
and reported on its own), checked against the rows written. Run from the repository root:

    .venv/bin/python -m bench.backfill --spans 200000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bench.common import RESULTS_DIR, build_payloads, count_rows, machine, workdir, write_results
from otel_delta.backfill.run import backfill
from otel_delta.config import Settings, SparkSettings
from otel_delta.spark.session import spark_session
from otel_delta.spark.standalone import spark_env, standalone_cluster

RESULTS_FILE = RESULTS_DIR / "backfill-latest.json"


def write_files(folder: Path, spans: int, spans_per_request: int, files: int) -> list[str]:
    payloads = build_payloads(spans, spans_per_request, seed=7)
    paths = []
    per_file = -(-len(payloads) // files)
    for index in range(files):
        chunk = payloads[index * per_file : (index + 1) * per_file]
        if not chunk:
            break
        path = folder / f"traces-{index:03d}.pb"
        path.write_bytes(b"".join(len(p.data).to_bytes(4, "big") + p.data for p in chunk))
        paths.append(str(path))
    return paths


def settings(lake: Path, engine: str) -> Settings:
    return Settings(deltalake={"table_path": str(lake), "operations": {"engine": engine}})


def load(name: str, lake: Path, files: list[str], spans: int, **kwargs) -> dict:
    engine = "delta-rs" if name == "delta-rs" else "spark"
    started = time.perf_counter()
    report = backfill(settings(lake, engine), files, show_progress=False, **kwargs)
    seconds = time.perf_counter() - started
    stored = count_rows(lake)
    if stored != spans or report.rows.get("spans") != spans:
        raise SystemExit(f"{name}: {stored} spans stored, {spans} expected")
    print(f"{name:<18} {seconds:8.2f} s {spans / seconds:>12,.0f} rows/s", flush=True)
    return {"seconds": round(seconds, 3), "rows_per_second": round(spans / seconds)}


def timed_session(**kwargs):
    started = time.perf_counter()
    session = spark_session(SparkSettings(**kwargs))
    session.range(1).count()  # first job: executors up
    return session, round(time.perf_counter() - started, 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=200_000)
    parser.add_argument("--spans-per-request", type=int, default=2000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--skip-standalone", action="store_true")
    args = parser.parse_args(argv)
    os.environ.update(spark_env())
    results: dict = {
        "spans": args.spans,
        "files": args.files,
        "spans_per_request": args.spans_per_request,
        # other work on the machine skews all
        "machine": machine(load_average_at_start=os.getloadavg()[0]),
        "loads": {},
        "spark_session_start_seconds": {},
    }
    with workdir() as work:
        (work / "in").mkdir()
        files = write_files(work / "in", args.spans, args.spans_per_request, args.files)
        size = sum(Path(f).stat().st_size for f in files)
        print(f"{len(files)} files, {size / 1e6:.1f} MB, {args.spans:,} spans", flush=True)
        results["input_bytes"] = size

        results["loads"]["delta-rs"] = load("delta-rs", work / "rs", files, args.spans)

        session, start = timed_session(master="local[2]")
        results["spark_session_start_seconds"]["local[2]"] = start
        print(f"Spark local session start {start:.1f} s", flush=True)
        results["loads"]["spark-local"] = load(
            "spark-local", work / "local", files, args.spans, session_factory=lambda: session
        )
        session.stop()

        if not args.skip_standalone:
            with standalone_cluster(work, cores=2, memory="1g") as cluster:
                conf = {"spark.executor.memory": "768m", "spark.cores.max": "2"}
                session, start = timed_session(master=cluster.url, conf=conf)
                results["spark_session_start_seconds"]["standalone"] = start
                print(f"Spark standalone session start {start:.1f} s", flush=True)
                results["loads"]["spark-standalone"] = load(
                    "spark-standalone",
                    work / "cluster",
                    files,
                    args.spans,
                    session_factory=lambda: session,
                )
                session.stop()
    write_results(results, RESULTS_FILE)
    print(f"wrote {RESULTS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
