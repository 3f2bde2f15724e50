"""Old checkpoints thinned to one an hour: what keeps a table's log from outweighing its data.

A checkpoint holds the whole state of its version, tombstones included. A table that commits
every 10 s writes one every `checkpoint_interval` (100) commits, some 86 a day, and once
compacted each carries a week of tombstones (`delta.deletedFileRetentionDuration`): some
300,000 rows, 31 MB (bench/log_steady_state.py). The log keeps its entries, checkpoints
included, for `delta.logRetentionDuration`: a week of them is 605 checkpoints, 18.8 GB per
table, for telemetry whose week may take a few hundred MB.

A checkpoint is only a shortcut: a version is read from the newest checkpoint at or before it,
then the commits after it. What is deleted: of the checkpoints older than DENSE_SECONDS, all
but the first of each clock hour by write time, so reading an older version replays at most
an hour of commits plus one checkpoint's interval; the week keeps about 176 checkpoints where it
kept 605. What is kept whatever its hour:

- the two newest: every open starts from the newest, and a handle opened before it (the
  bridge's writer reopens every `checkpoint_interval` appends) still reads the one before it
  when it looks up a transaction or vacuums;
- the oldest, where the log's replay starts (the commits before it are gone);
- those written less than EDGE_SECONDS after the log retention's cutoff: the log cleanup
  (delta-rs's, Spark's, another replica's) deletes the commits before the newest checkpoint
  at or before the cutoff, and a listing taken here before another process's cleanup would
  otherwise delete that very checkpoint, leaving the versions after it without a base;
- multi-part and V2 checkpoints (Spark may write them): only classic single-file ones are
  touched.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from datetime import datetime

import pyarrow.fs as pa_fs

CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
ANY_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.")
DENSE_SECONDS = 3600  # checkpoints this young are all kept
SPACING_SECONDS = 3600  # older ones: the first of each such span of write times
EDGE_SECONDS = 2 * 3600  # and those this close to the log retention's cutoff
NEWEST_KEPT = 2
INTERVAL = re.compile(r"^\s*(?:interval\s+)?(\d+(?:\.\d+)?)\s+([a-z]+?)s?\s*$", re.IGNORECASE)
UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
DELTA_LOG_RETENTION = 30 * 86400.0  # Delta's default delta.logRetentionDuration


def log_retention_seconds(configuration: Mapping[str, str | None]) -> float | None:
    """A table's `delta.logRetentionDuration` in seconds (Delta's 30 days when unset); None
    when it is written in a form not understood here, and then nothing is thinned."""
    text = configuration.get("delta.logRetentionDuration")
    if text is None:
        return DELTA_LOG_RETENTION
    match = INTERVAL.match(text)
    unit = UNIT_SECONDS.get(match.group(2).lower()) if match else None
    return float(match.group(1)) * unit if match and unit else None


def thin_checkpoints(
    filesystem: pa_fs.FileSystem, now: float, retention_seconds: float | None
) -> list[int]:
    """Delete the checkpoints of the table rooted at `filesystem` that the rules above do not
    keep, `now` being seconds since the epoch and `retention_seconds` the table's log retention
    (None: keep them all); returns their versions."""
    if retention_seconds is None:
        return []
    selector = pa_fs.FileSelector("_delta_log", allow_not_found=True)
    single: dict[int, tuple[str, float]] = {}
    other: set[int] = set()
    for info in filesystem.get_file_info(selector):
        name = info.base_name
        if match := CHECKPOINT_FILE.match(name):
            single[int(match.group(1))] = (info.path, _seconds(info.mtime, now))
        elif match := ANY_CHECKPOINT.match(name):
            other.add(int(match.group(1)))
    versions = sorted(single.keys() | other)
    keep = {*versions[:1], *versions[-NEWEST_KEPT:], *other}
    edge = now - retention_seconds + EDGE_SECONDS
    hours_kept: set[int] = set()
    for version in versions:  # oldest first: the first of each hour is kept
        if version in other:
            continue
        _, written = single[version]
        hour = int(written // SPACING_SECONDS)
        if now - written < DENSE_SECONDS or written < edge or hour not in hours_kept:
            keep.add(version)
            hours_kept.add(hour)
    thinned = [version for version in versions if version not in keep]
    for version in thinned:
        with contextlib.suppress(FileNotFoundError):  # another process's cleanup was first
            filesystem.delete_file(single[version][0])
    return thinned


def checkpoint_gone(error: BaseException) -> bool:
    """Is `error` delta-rs failing to read a checkpoint that is no longer there (a handle
    built on one that was thinned since)?"""
    text = str(error)
    return ".checkpoint." in text and "not found" in text.lower()


def _seconds(mtime: datetime | None, now: float) -> float:
    """A file's write time; a store that gives none makes it count as new (kept)."""
    return mtime.timestamp() if mtime is not None else now
