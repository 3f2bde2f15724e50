"""Vacuum with delta-rs, listing and counting only the files that are there.

What a vacuum deletes, on either engine (the Spark engine's VACUUM is told the same):

- files some commit removed more than `retention_hours` ago (delta-rs's default "lite" mode,
  Delta's LITE): their tombstones say when;
- files no commit references — left by a writer that died between writing its files and
  committing them (the bridge, the stream, a compaction) — once they are older than
  `max(retention_hours, UNCOMMITTED_MIN_HOURS)` (delta-rs's "full" mode, Delta's default
  FULL). A younger one may belong to a commit in flight (a bridge's append takes seconds, a
  group held while commits fail longer), so a short retention never reaches them: VACUUM
  RETAIN 0 HOURS beside a serving bridge would otherwise delete files of a commit about to
  land, and rows it acknowledged.

delta-rs takes the candidates of the first kind from the log's tombstones, which stay in the
log until `delta.deletedFileRetentionDuration` (a week by default), also after an earlier
vacuum or purge deleted their files. It lists those gone files again, counts a missing file as
deleted, and commits them as such (VACUUM START `numFilesToDelete`, VACUUM END
`numDeletedFiles`): a second vacuum "removed" every file the first one did. So dry runs first,
keeping the candidates that exist; then

- a dry run returns those;
- with none, nothing is vacuumed at all (delta-rs would commit two entries claiming deletions);
- otherwise delta-rs vacuums (each kind that has files: one or two VACUUM START/END pairs),
  with the figures of the files that are there recorded in its commits (`otel_delta.metrics.*`,
  which the connector's history shows in place of delta-rs's own), and the files that were
  there before and are gone after are returned.

A file tombstoned between the dry run and the vacuum (a commit landing meanwhile, with a short
retention) is deleted by delta-rs without being counted here.
"""

from __future__ import annotations

import pyarrow.fs as pa_fs
from deltalake import DeltaTable

from otel_delta.engines.data_files import table_filesystem
from otel_delta.lakehouse import Lakehouse

# files no commit references are deleted only past this age, whatever the retention: see above
UNCOMMITTED_MIN_HOURS = 168


def uncommitted_hours(retention_hours: int) -> int:
    """The age past which a vacuum with `retention_hours` deletes files no commit references."""
    return max(retention_hours, UNCOMMITTED_MIN_HOURS)


def vacuum_files(
    lakehouse: Lakehouse, name: str, table: DeltaTable, retention_hours: int, dry_run: bool
) -> list[str]:
    """Vacuum table `name` (opened as `table`) past `retention_hours`, or with `dry_run` list
    what that would delete; returns the data files, relative to the table, that existed and
    were deleted (or would be)."""
    # the caller chose the retention explicitly (enforce_retention_duration=False)
    removed = table.vacuum(
        retention_hours=retention_hours, dry_run=True, enforce_retention_duration=False
    )
    full = table.vacuum(
        retention_hours=uncommitted_hours(retention_hours),
        dry_run=True,
        enforce_retention_duration=False,
        full=True,
    )
    candidates = sorted({*removed, *full})
    if not candidates:
        return []
    filesystem = table_filesystem(lakehouse.uri(name), lakehouse.storage, create=False)
    sizes = {
        path: info.size or 0
        for path, info in zip(candidates, filesystem.get_file_info(candidates), strict=True)
        if info.type == pa_fs.FileType.File
    }
    present = list(sizes)
    if dry_run or not present:
        return present
    uncommitted = set(full) - set(removed)
    for paths, hours, whole in (
        ([p for p in present if p not in uncommitted], retention_hours, False),
        ([p for p in present if p in uncommitted], uncommitted_hours(retention_hours), True),
    ):
        if not paths:
            continue
        figures = {
            "numFilesToDelete": len(paths),
            "sizeOfDataToDelete": sum(sizes[p] for p in paths),
            "numDeletedFiles": len(paths),
        }
        table.vacuum(
            retention_hours=hours,
            dry_run=False,
            enforce_retention_duration=False,
            commit_properties=lakehouse.commit_properties(metrics=figures),
            full=whole,
        )
    after = filesystem.get_file_info(present)
    return [
        path
        for path, info in zip(present, after, strict=True)
        if info.type == pa_fs.FileType.NotFound
    ]
