"""Old checkpoints thinned to one an hour: what keeps a table's log from outweighing its data.

A checkpoint holds the whole state of its version, tombstones included. A table that commits
every 10 s writes one every `checkpoint_interval` (100) commits, some 86 a day, and once
compacted each carries a week of tombstones (`delta.deletedFileRetentionDuration`): some
300,000 rows, 31.5 MB (measured, docs/performance.md). The log keeps its entries, checkpoints
included, for `log_retention_hours`: a week of them is 605 checkpoints, 19 GB per table, for
telemetry whose week may take a few hundred MB.

A checkpoint is only a shortcut: a version is read from the newest checkpoint at or before it,
then the commits after it. So every checkpoint younger than DENSE_SECONDS is kept (a reader
may have listed it just now), and of the older ones the first of each hour by its write time:
reading an older version replays at most an hour of commits (360 at a 10 s flush), and the
week keeps 168 checkpoints, 3.5 times fewer. Kept always: the newest (every open starts from
it) and the oldest (the commits before it are gone: it is where the log starts). Only classic
single-file checkpoints are touched; a multi-part or V2 checkpoint (Spark may write them)
marks its version to keep.

A race with another process's log cleanup that deletes the checkpoint this one keeps as the
hour's can leave that hour's older versions without a base: reading them then fails, the table
and its newer versions do not.
"""

from __future__ import annotations

import contextlib
import re
from datetime import datetime

import pyarrow.fs as pa_fs

CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
ANY_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.")
DENSE_SECONDS = 3600  # checkpoints this young are all kept
SPACING_SECONDS = 3600  # older ones: the first of each such span of write times


def thin_checkpoints(filesystem: pa_fs.FileSystem, now: float) -> list[int]:
    """Delete the checkpoints of the table rooted at `filesystem` that the rule above does not
    keep, `now` being seconds since the epoch; returns their versions."""
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
    if len(versions) <= 2:
        return []
    keep = {versions[0], versions[-1], *other}
    hours_kept: set[int] = set()
    for version in versions:  # oldest first: the first of each hour is kept
        if version in other:
            continue
        _, written = single[version]
        hour = int(written // SPACING_SECONDS)
        if now - written < DENSE_SECONDS or hour not in hours_kept:
            keep.add(version)
            hours_kept.add(hour)
    thinned = [version for version in versions if version not in keep]
    for version in thinned:
        with contextlib.suppress(FileNotFoundError):  # another process's cleanup was first
            filesystem.delete_file(single[version][0])
    return thinned


def _seconds(mtime: datetime | None, now: float) -> float:
    """A file's write time; a store that gives none makes it count as new (kept)."""
    return mtime.timestamp() if mtime is not None else now
