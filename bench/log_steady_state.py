"""A table's Delta log in its steady state, from measured parts: what weeks of commits leave.

bench/long_run.py compresses a day into minutes, so neither retention can act within it: it
shows a log growing from empty, never the bounded log of a table in service. This measures the
two things a fresh open of a table pays for, each on a synthetic log (delta-rs, local disk,
median of fresh `DeltaTable` opens):

- the log's entries, which delta-rs lists whole on a local disk (and on stores that cannot
  list from an offset): N minimal commits, then a checkpoint;
- a checkpoint's tombstones (the compacted files' remove actions, kept for
  `delta.deletedFileRetentionDuration`): a checkpoint of N of them, its bytes too.

From a least-squares line through each, it prints a table flushed every `--flush-seconds` to
`--partitions` partitions (one file each per flush, each compacted away: a tombstone), with a
checkpoint every `--checkpoint-interval` commits, in its steady state under several retentions:
log entries, checkpoints kept (every one, or thinned as engines/checkpoint_thinning.py thins
them), their bytes, and an open's time.

    .venv/bin/python -m bench.log_steady_state            # ~3 min
    .venv/bin/python -m bench.log_steady_state --full     # adds 260,000 entries (~10 min)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from bench.common import RESULTS_DIR, finish, workdir

HOUR = 3600.0
OPENS = 9


def median_open_ms(path: Path) -> float:
    times = []
    for _ in range(OPENS):
        started = time.perf_counter()
        DeltaTable(str(path))
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def log_of_entries(path: Path, entries: int) -> float:
    """A table of `entries` minimal commits and a checkpoint of the last; its open, ms."""
    write_deltalake(str(path), pa.table({"n": [0]}))
    log = path / "_delta_log"
    line = json.dumps({"commitInfo": {"timestamp": int(time.time() * 1000)}}) + "\n"
    for version in range(1, entries + 1):
        (log / f"{version:020d}.json").write_text(line)
    DeltaTable(str(path)).create_checkpoint()
    return median_open_ms(path)


def checkpoint_of_tombstones(path: Path, tombstones: int) -> tuple[float, int]:
    """A table whose checkpoint holds `tombstones` removed files (and one live); its open in
    ms and the checkpoint's bytes."""
    write_deltalake(
        str(path),
        pa.table({"service_name": ["a"], "date": ["2026-11-28"], "n": [0]}),
        partition_by=["service_name", "date"],
    )
    log = path / "_delta_log"
    now = int(time.time() * 1000)
    files = [
        (f"service_name=s{i % 5}/date=2026-11-28/part-00001-{uuid.uuid4()}-c000.zstd.parquet", i)
        for i in range(tombstones)
    ]

    def action(kind: str, name: str, i: int) -> str:
        common = {"path": name, "partitionValues": {"service_name": f"s{i % 5}", "date": "d"}}
        if kind == "add":
            body = {**common, "size": 40_000, "modificationTime": now, "dataChange": True}
        else:
            body = {**common, "size": 40_000, "deletionTimestamp": now, "dataChange": False}
            body["extendedFileMetadata"] = True
        return json.dumps({kind: body}) + "\n"

    for version, kind in ((1, "add"), (2, "remove")):
        with open(log / f"{version:020d}.json", "w") as entry:
            entry.write(json.dumps({"commitInfo": {"timestamp": now}}) + "\n")
            entry.writelines(action(kind, name, i) for name, i in files)
    DeltaTable(str(path)).create_checkpoint()
    checkpoint = log / f"{2:020d}.checkpoint.parquet"
    return median_open_ms(path), checkpoint.stat().st_size


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Slope and intercept of the least-squares line through `points`."""
    xs, ys = zip(*points, strict=True)
    slope, intercept = np.polyfit(xs, ys, 1)
    return float(slope), float(intercept)


def kept_checkpoints(log_hours: float, per_hour: float, thinned: bool) -> float:
    """Checkpoints a log of `log_hours` keeps at `per_hour` written: all, or as thinned (the
    last hour's, the first of each older hour, and two hours' at the retention's cutoff)."""
    if not thinned:
        return log_hours * per_hour
    return per_hour + max(log_hours - 3, 0) + 2 * per_hour


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flush-seconds", type=float, default=10.0)
    parser.add_argument("--partitions", type=int, default=5, help="files (tombstones) a flush")
    parser.add_argument("--checkpoint-interval", type=int, default=100)
    parser.add_argument("--full", action="store_true", help="also 260,000 log entries")
    args = parser.parse_args()
    entries = [1_000, 10_000, 60_000] + ([260_000] if args.full else [])
    tombstones = [10_000, 43_000, 300_000]
    entry_points, tomb_points, tomb_bytes = [], [], []
    with workdir("log-steady-") as root:
        for n in entries:
            ms = log_of_entries(root / f"e{n}", n)
            entry_points.append((n, ms))
            print(f"{n:>9,} log entries: open {ms:7.1f} ms", flush=True)
        for n in tombstones:
            ms, size = checkpoint_of_tombstones(root / f"t{n}", n)
            tomb_points.append((n, ms))
            tomb_bytes.append((n, size))
            print(f"{n:>9,} tombstones: open {ms:7.1f} ms, checkpoint {size:,} B", flush=True)
    per_entry, entry_base = fit(entry_points)
    per_tomb, _ = fit(tomb_points)
    bytes_per_tomb, _ = fit(tomb_bytes)
    commits_per_hour = HOUR / args.flush_seconds
    checkpoints_per_hour = commits_per_hour / args.checkpoint_interval
    tombs_per_hour = commits_per_hour * args.partitions
    print(
        f"\nper log entry {per_entry * 1000:.2f} µs, per tombstone {per_tomb * 1000:.2f} µs and "
        f"{bytes_per_tomb:.0f} B; a flush every {args.flush_seconds:g} s to "
        f"{args.partitions} partitions, a checkpoint every {args.checkpoint_interval} commits\n"
    )
    cases = [
        ("Delta's 30 days / a week, every checkpoint", 720, 168, False),
        ("a week / a week, every checkpoint", 168, 168, False),
        ("a week / a week, thinned (the defaults)", 168, 168, True),
        ("26 h / 26 h, thinned (retention_hours = 24)", 26, 26, True),
    ]
    rows = []
    header = ("log / tombstones", "entries", "checkpoints", "their GB", "open ms")
    print("{:<46} {:>9} {:>11} {:>9} {:>8}".format(*header))
    for label, log_hours, tomb_hours, thinned in cases:
        count = log_hours * commits_per_hour
        tombs = tomb_hours * tombs_per_hour
        kept = kept_checkpoints(log_hours, checkpoints_per_hour, thinned)
        gigabytes = kept * tombs * bytes_per_tomb / 1e9
        open_ms = entry_base + per_entry * (count + kept) + per_tomb * tombs
        rows.append(
            {
                "case": label,
                "log_entries": round(count),
                "checkpoints_kept": round(kept),
                "checkpoint_gb": round(gigabytes, 2),
                "open_ms": round(open_ms, 1),
            }
        )
        print(f"{label:<46} {count:>9,.0f} {kept:>11,.0f} {gigabytes:>9.2f} {open_ms:>8.0f}")
    return finish(
        RESULTS_DIR / "log-steady-state-latest.json",
        vars(args),
        [],
        entries=entry_points,
        tombstones=tomb_points,
        checkpoint_bytes=tomb_bytes,
        steady_state=rows,
    )


if __name__ == "__main__":
    os.environ.setdefault("RUST_LOG", "error")
    raise SystemExit(main())
