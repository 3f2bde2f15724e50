"""Hard deletes: rows that leave the current version also leave every file under the table.

A Delta DELETE only tombstones the files that held the rows: earlier versions still reference
them, so time travel (and `restore`) returns the rows until a vacuum past the retention period;
and the log keeps per-file min/max statistics of earlier commits (span ids, body prefixes), and
the change data feed keeps `_change_data` files. After the delete, `purge` therefore

1. vacuums every tombstoned file at once (retention 0). Only files some commit removed are
   touched, never a file another writer has written but not committed yet; only those still
   there count (engines/vacuum.py: delta-rs lists the files of tombstones that an earlier
   vacuum or purge deleted until the tombstones expire);
2. writes a checkpoint of the current version (readers then start there);
3. deletes every log entry and checkpoint older than that version, and every `_change_data`
   file, so that no earlier version can be loaded and no file under the table holds the rows.

Time travel to a version before the purge then fails (VersionNotFoundError), not with data
that should be gone. Local paths and S3 (the stores `Lakehouse.files` reaches).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow.fs as pafs
from deltalake import DeltaTable

from otel_delta.engines.vacuum import vacuum_files
from otel_delta.errors import InvalidQueryError
from otel_delta.lakehouse import Lakehouse

LOG_ENTRY = re.compile(r"^(\d{20})\.")  # 00000000000000000042.json / .checkpoint.parquet / .crc


@dataclass(frozen=True)
class Purge:
    files_purged: int  # data files physically removed (not those already gone)
    log_entries_removed: int  # log entries, older checkpoints and change data files
    version: int  # the version every reader now starts from


def check_purgeable(lakehouse: Lakehouse, name: str, delta: DeltaTable) -> None:
    """Raise before anything is deleted if the purge could not complete: a store we cannot
    list and delete on, or deletion vectors (a delete that writes them leaves the rows in the
    files it keeps referencing)."""
    lakehouse.files(name, "a hard delete")
    configuration = delta.metadata().configuration
    if configuration.get("delta.enableDeletionVectors", "false").lower() == "true":
        raise InvalidQueryError(
            f"table {name} has deletion vectors on (delta.enableDeletionVectors): a delete "
            "would mark rows deleted and keep them in their files; turn them off first"
        )


def purge(lakehouse: Lakehouse, name: str) -> Purge:
    """Physically remove what the table's current version no longer holds (see above)."""
    uri = lakehouse.uri(name)
    table = DeltaTable(uri, storage_options=lakehouse.storage)
    vacuumed = vacuum_files(lakehouse, name, table, retention_hours=0, dry_run=False)
    table = DeltaTable(uri, storage_options=lakehouse.storage)
    table.create_checkpoint()
    version = table.version()
    filesystem, path = lakehouse.files(name, "a hard delete")
    removed = _remove_log_before(filesystem, f"{path}/_delta_log", version)
    removed += _remove_all(filesystem, f"{path}/_change_data")
    return Purge(len(vacuumed), removed, version)


def _remove_log_before(filesystem: pafs.FileSystem, log: str, version: int) -> int:
    removed = 0
    for info in filesystem.get_file_info(pafs.FileSelector(log, recursive=False)):
        entry = LOG_ENTRY.match(info.base_name)
        if info.type == pafs.FileType.File and entry and int(entry[1]) < version:
            filesystem.delete_file(info.path)
            removed += 1
    return removed


def _remove_all(filesystem: pafs.FileSystem, directory: str) -> int:
    selector = pafs.FileSelector(directory, recursive=True, allow_not_found=True)
    files = [i.path for i in filesystem.get_file_info(selector) if i.type == pafs.FileType.File]
    for file in files:
        filesystem.delete_file(file)
    return len(files)
