"""Vacuum with delta-rs, listing and counting only the files that are there.

delta-rs's vacuum (its default "lite" mode, the only one we use: it deletes files some commit
removed, never a file a writer has written but not committed yet) takes its candidates from the
log's tombstones, which stay in the log until `delta.deletedFileRetentionDuration` (a week by
default), also after an earlier vacuum or purge deleted their files. It lists those gone files
again, counts a missing file as deleted, and commits them as such (VACUUM START
`numFilesToDelete`, VACUUM END `numDeletedFiles`): a second vacuum "removed" every file the
first one did. So a dry run first, keeping the candidates that exist; then

- a dry run returns those;
- with none, nothing is vacuumed at all (delta-rs would commit two entries claiming deletions);
- otherwise delta-rs vacuums, with the figures of the files that are there recorded in its
  commits (`otel_delta.metrics.*`, which the connector's history shows in place of delta-rs's
  own), and the files that were there before and are gone after are returned.

A file tombstoned between the dry run and the vacuum (a commit landing meanwhile, with a short
retention) is deleted by delta-rs without being counted here.
"""

from __future__ import annotations

import pyarrow.fs as pa_fs
from deltalake import DeltaTable

from otel_delta.engines.data_files import table_filesystem
from otel_delta.lakehouse import Lakehouse


def vacuum_files(
    lakehouse: Lakehouse, name: str, table: DeltaTable, retention_hours: int, dry_run: bool
) -> list[str]:
    """Vacuum table `name` (opened as `table`) past `retention_hours`, or with `dry_run` list
    what that would delete; returns the data files, relative to the table, that existed and
    were deleted (or would be)."""
    candidates = table.vacuum(
        retention_hours=retention_hours,
        dry_run=True,
        enforce_retention_duration=False,  # the caller chose the retention explicitly
    )
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
    figures = {
        "numFilesToDelete": len(present),
        "sizeOfDataToDelete": sum(sizes.values()),
        "numDeletedFiles": len(present),
    }
    table.vacuum(
        retention_hours=retention_hours,
        dry_run=False,
        enforce_retention_duration=False,
        commit_properties=lakehouse.commit_properties(metrics=figures),
    )
    after = filesystem.get_file_info(present)
    return [
        path
        for path, info in zip(present, after, strict=True)
        if info.type == pa_fs.FileType.NotFound
    ]
