"""Long-run table health: a day's worth of commits, time compressed, with maintenance running.

At the ingest defaults (`flush_interval_seconds = 10`) a busy table gets 8,640 commits a day.
This drives that many appends through the bridge's writer (`DeltaRsEngine.append`, each with
the Delta transaction id the write-ahead log gives it) into today's partition, and runs one
round of the scheduled maintenance every `--commits-per-round` commits (360: hourly at a 10 s
flush), inline between two commits, as `serve`'s maintainer would (checkpoints, log cleanup,
clustered compaction of today's files once older than `--open-age-seconds`, vacuum); inline,
so that commit latency is the table's and not two threads sharing two cores. Then the day is
closed (a maintenance round with tomorrow's date) and it reports:

- commit latency and table-open latency (a fresh `DeltaTable`, as a reader or a restarted
  bridge opens it) in the first and the last 10% of the run, and their ratio (goal: ≤ 1.2);
- the size of `_delta_log`, of the latest checkpoint, and the live files of the partition,
  during the day and after it closed, against ceil(bytes / target file size).

    .venv/bin/python -m bench.long_run --commits 8640 --rows 200
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable
from deltalake.transaction import Transaction

from bench.common import RESULTS_DIR, finish, workdir
from bench.trace_lookup import span_batch
from otel_delta.bridge import build_engines
from otel_delta.config import Settings
from otel_delta.lakehouse import STATS_COLUMNS
from otel_delta.maintenance import Maintainer, MaintenancePolicy
from otel_delta.maintenance.compaction import candidates
from otel_delta.maintenance.tasks import TablePolicy, maintain_table, utc_today
from otel_delta.tables import TABLES

RESULTS_FILE = RESULTS_DIR / "long-run-latest.json"
APP_ID = "long-run-bench"


def day_batches(rng: np.random.Generator, rows: int, count: int) -> list[pa.Table]:
    """`count` distinct batches of today's spans (5 services), reused in turn: generating them
    is not what is measured."""
    batches = []
    for _ in range(count):
        batch, _ids = span_batch(rng, rows)
        today = pa.array([utc_today()] * batch.num_rows, pa.date32())
        batches.append(batch.set_column(batch.schema.get_field_index("date"), "date", today))
    return batches


def log_bytes(table: Path) -> tuple[int, int]:
    """(bytes of _delta_log, bytes of the latest checkpoint)."""
    log = table / "_delta_log"
    total = sum(p.stat().st_size for p in log.iterdir() if p.is_file())
    checkpoints = sorted(log.glob("*.checkpoint*.parquet"))
    return total, (checkpoints[-1].stat().st_size if checkpoints else 0)


def partition_files(uri: str) -> tuple[int, int]:
    """(most live files in one partition, bytes of that partition)."""
    files: dict[tuple, list[int]] = {}
    for file in candidates(DeltaTable(uri)):
        files.setdefault(file.partition, []).append(file.size)
    fullest = max(files.values(), key=len)
    return len(fullest), sum(fullest)


def open_latency(uri: str) -> float:
    started = time.perf_counter()
    DeltaTable(uri).version()
    return time.perf_counter() - started


def tenth(values: list[float], last: bool) -> float:
    n = max(len(values) // 10, 1)
    return statistics.median(values[-n:] if last else values[:n])


def run(args: argparse.Namespace, root: Path) -> dict:
    settings = Settings(deltalake={"table_path": str(root)})
    engines = build_engines(settings)  # as `serve` builds them: its maintainer checkpoints
    lake, engine = engines.lakehouse, engines.delta_rs
    table_policy = TablePolicy(
        retention_hours=0,  # compressed time: vacuum what maintenance removed, at once
        open_partition_age_seconds=args.open_age_seconds,
    )
    maintainer = Maintainer(
        MaintenancePolicy(
            interval_seconds=3600.0,
            table=table_policy,
            settings=settings,
            tables=("spans",),
        )
    )
    batches = day_batches(np.random.default_rng(1), args.rows, 16)
    uri = lake.uri("spans")
    created = lake.create_table("spans")
    if args.all_stats:  # the baseline: statistics of every column, as before stats_columns
        every = [f.name for f in TABLES["spans"].schema if f.name not in lake.partition_by]
        created.alter.set_table_properties({STATS_COLUMNS: ",".join(every)})
    engine.append("spans", batches[0], Transaction(APP_ID, 0))
    commits, opens, samples = [], [], []
    started = time.monotonic()
    try:
        for i in range(1, args.commits):
            t = time.perf_counter()
            engine.append("spans", batches[i % len(batches)], Transaction(APP_ID, i))
            commits.append(time.perf_counter() - t)
            if args.commits_per_round and i % args.commits_per_round == 0:
                maintainer.run_round()
            if i % args.sample_every == 0:
                opens.append(open_latency(uri))
                files, _ = partition_files(uri)
                log, checkpoint = log_bytes(root / "spans")
                samples.append({"commit": i, "files": files, "log": log, "checkpoint": checkpoint})
                print(f"  commit {i}: {files} live files, log {log:,} B", file=sys.stderr)
    finally:
        maintainer.stop()  # never started: rounds run inline, between commits
    elapsed = time.monotonic() - started
    during_files, during_bytes = partition_files(uri)
    tomorrow = utc_today() + dt.timedelta(days=1)
    closing = maintain_table(maintainer.connector.table("spans"), table_policy, today=tomorrow)
    closed_files, closed_bytes = partition_files(uri)
    log, checkpoint = log_bytes(root / "spans")
    rows = DeltaTable(uri).to_pyarrow_table(columns=["span_id"]).num_rows
    return {
        "commits": args.commits,
        "rows": rows,
        "expected_rows": args.commits * args.rows,
        "seconds": round(elapsed, 1),
        "maintenance_rounds": maintainer.rounds_run,
        "maintenance_errors": sum(t.errors for t in maintainer.totals.values()),
        "commit_ms_first10": round(tenth(commits, False) * 1000, 2),
        "commit_ms_last10": round(tenth(commits, True) * 1000, 2),
        "open_ms_first10": round(tenth(opens, False) * 1000, 2),
        "open_ms_last10": round(tenth(opens, True) * 1000, 2),
        "log_bytes": log,
        "checkpoint_bytes": checkpoint,
        "files_during_day": during_files,
        "bytes_during_day": during_bytes,
        "files_after_close": closed_files,
        "bytes_after_close": closed_bytes,
        "closing_errors": closing.errors,
        "files_goal_after_close": max(math.ceil(closed_bytes / table_policy.target_file_size), 1),
        "samples": samples,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=8640)
    parser.add_argument("--rows", type=int, default=200, help="spans per commit")
    parser.add_argument(
        "--commits-per-round",
        type=int,
        default=360,
        help="commits between maintenance rounds (360 = hourly at a 10 s flush; 0: none)",
    )
    parser.add_argument(
        "--open-age-seconds",
        type=float,
        default=1.5,
        help="open-partition compaction age (1.5 s ≈ the 900 s default, time compressed)",
    )
    parser.add_argument("--sample-every", type=int, default=100)
    parser.add_argument(
        "--all-stats", action="store_true", help="statistics of every column (a baseline)"
    )
    args = parser.parse_args()
    with workdir("long-run-") as path:
        figures = run(args, path / "lake")
    problems = []
    if figures["rows"] != figures["expected_rows"]:
        problems.append(f"rows {figures['rows']} != {figures['expected_rows']} appended")
    if figures["maintenance_errors"] or figures["closing_errors"]:
        problems.append("maintenance reported errors")
    commit_ratio = figures["commit_ms_last10"] / figures["commit_ms_first10"]
    open_ratio = figures["open_ms_last10"] / figures["open_ms_first10"]
    print(
        f"{figures['commits']:,} commits in {figures['seconds']} s, "
        f"{figures['maintenance_rounds']} maintenance rounds\n"
        f"commit p50: first 10% {figures['commit_ms_first10']} ms, last 10% "
        f"{figures['commit_ms_last10']} ms (last/first {commit_ratio:.2f})\n"
        f"table open p50: first 10% {figures['open_ms_first10']} ms, last 10% "
        f"{figures['open_ms_last10']} ms (last/first {open_ratio:.2f})\n"
        f"_delta_log {figures['log_bytes']:,} B, latest checkpoint "
        f"{figures['checkpoint_bytes']:,} B\n"
        f"live files: {figures['files_during_day']} during the day "
        f"({figures['bytes_during_day']:,} B), {figures['files_after_close']} after it closed "
        f"(goal ≤ {figures['files_goal_after_close']})"
    )
    return finish(
        RESULTS_FILE,
        vars(args),
        problems,
        commit_ratio=round(commit_ratio, 2),
        open_ratio=round(open_ratio, 2),
        **figures,
    )


if __name__ == "__main__":
    sys.exit(main())
