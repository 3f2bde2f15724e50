"""A commit's metrics under one set of names on either engine: `HistoryEntry.normalized_metrics`.

Each engine names the figures of its commits its own way: Spark in camelCase with string values
("numOutputRows": "300"), delta-rs in snake_case with numbers ("num_output_rows": 300), except
its OPTIMIZE and RESTORE, in camelCase of other words than Spark's ("numFilesAdded" where Spark
has "numAddedFiles", "numRestoredFile" where it has "numRestoredFiles"); our own appends
record delta-rs's names (lakehouse.METRICS_PREFIX). A history compared or charted across
engines had to know them all. Here each figure both engines report gets one snake_case name
and an int value (counts, bytes, milliseconds); figures only one engine reports keep a name
of the same convention; anything else (sizes' percentiles, flags, the planner's strategy) is
left to `HistoryEntry.metrics`, which keeps every figure as the engine wrote it.
"""

from __future__ import annotations

import json
from typing import Any

# the rows of the files a commit added, as each engine counts them: a MERGE's inserted, updated
# and copied rows alike (delta-rs's num_output_rows, Spark's numOutputRows). Not delta-rs's
# num_target_rows_inserted, which made the same upsert 0 rows on delta-rs and 300 on Spark.
ROWS_WRITTEN_METRICS = (
    "num_added_rows",
    "numOutputRows",
    "num_output_rows",
)

# common name -> the names engines give the figure (ours and delta-rs's, then Spark's); a
# commit carrying more than one of them (none does) gives the first
FIGURES: dict[str, tuple[str, ...]] = {
    # rows: WRITE / append, MERGE, UPDATE, DELETE
    "rows_written": ROWS_WRITTEN_METRICS,
    "source_rows": ("num_source_rows", "numSourceRows"),
    "rows_inserted": ("num_target_rows_inserted", "numTargetRowsInserted"),
    "rows_updated": (
        "num_target_rows_updated",
        "num_updated_rows",
        "numTargetRowsUpdated",
        "numUpdatedRows",
    ),
    "rows_deleted": (
        "num_target_rows_deleted",
        "num_deleted_rows",
        "numTargetRowsDeleted",
        "numDeletedRows",
    ),
    "rows_copied": (
        "num_target_rows_copied",
        "num_copied_rows",
        "numTargetRowsCopied",
        "numCopiedRows",
    ),
    # data files a commit added and removed (OPTIMIZE: rewritten; RESTORE: brought back)
    "files_added": (
        "num_added_files",
        "num_target_files_added",
        "numFilesAdded",
        "numRestoredFile",
        "numAddedFiles",
        "numTargetFilesAdded",
        "numRestoredFiles",
        "numFiles",
    ),
    "files_removed": (
        "num_removed_files",
        "num_target_files_removed",
        "numFilesRemoved",
        "numRemovedFile",
        "numRemovedFiles",
        "numTargetFilesRemoved",
    ),
    "files_scanned": ("num_target_files_scanned",),
    "files_skipped": ("num_target_files_skipped_during_scan",),
    "partitions_optimized": ("partitionsOptimized",),
    # bytes of those files (delta-rs's OPTIMIZE: `filesAdded` / `filesRemoved`, below)
    "bytes_added": (
        "numAddedBytes",
        "numTargetBytesAdded",
        "numOutputBytes",
        "restoredFilesSize",
    ),
    "bytes_removed": ("numRemovedBytes", "numTargetBytesRemoved", "removedFilesSize"),
    # VACUUM START / VACUUM END (the same names on both engines)
    "files_to_delete": ("numFilesToDelete",),
    "bytes_to_delete": ("sizeOfDataToDelete",),
    "files_deleted": ("numDeletedFiles",),
    "directories_vacuumed": ("numVacuumedDirectories",),
    # milliseconds
    "execution_time_ms": ("execution_time_ms", "executionTimeMs"),
    "scan_time_ms": ("scan_time_ms", "scanTimeMs"),
    "rewrite_time_ms": ("rewrite_time_ms", "rewriteTimeMs"),
    "materialize_source_time_ms": ("materializeSourceTimeMs",),
}

# delta-rs's OPTIMIZE keeps the sizes of the files it added and removed in a JSON summary
FILE_SUMMARIES = {"bytes_added": "filesAdded", "bytes_removed": "filesRemoved"}


def normalized(metrics: dict[str, Any]) -> dict[str, int]:
    """`metrics` (a commit's, as `history` gives them) under the common names of FIGURES, as
    ints; a figure the commit does not carry, or whose value is not a whole number, is left
    out."""
    out: dict[str, int] = {}
    for name, aliases in FIGURES.items():
        for alias in aliases:
            value = _whole(metrics.get(alias))
            if value is not None:
                out[name] = value
                break
    for name, summary in FILE_SUMMARIES.items():
        if name not in out and (value := _summary_total(metrics.get(summary))) is not None:
            out[name] = value
    return out


def _whole(value: Any) -> int | None:
    """An int from an engine's figure: Spark's are strings, delta-rs's numbers."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _summary_total(summary: Any) -> int | None:
    """`totalSize` of delta-rs's file summary ('{"avg":…,"totalSize":518}')."""
    if isinstance(summary, str):
        try:
            summary = json.loads(summary)
        except ValueError:
            return None
    return _whole(summary.get("totalSize")) if isinstance(summary, dict) else None
